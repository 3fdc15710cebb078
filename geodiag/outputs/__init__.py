"""Printing: what the gate judged and the analysis measured, in every form a person or a CI
system reads.

- ``text``: the terminal tables of ``metrics``, ``check`` and ``drift``;
- ``console``: a terminal's lines, wrapped to its width, statuses in colour;
- ``ci``: the CI pages: JUnit XML, the job summary (Markdown), workflow annotations;
- ``sarif``: the SARIF 2.1.0 log (GitHub code scanning);
- ``report/``: the HTML report, its JSON and the projector export.

Imports ``gate`` and ``analysis``; nothing below imports it.
"""
