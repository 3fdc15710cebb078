"""Item catalogs, interactions and user sequences (the first box of the data flow)."""
