"""Developer tools of this repository (not shipped in the wheel): the generators of the
docs pages and action.yml blocks derived from the code."""
