"""geodiag's version, below every module that reports it (results, the HTML report,
``--version``), so none of them imports the package's lazy front door."""

__version__ = "0.1.0"
