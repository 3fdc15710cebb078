"""The io tests' floor folders on ``sys.path``: a test of one floor imports another's
helpers by module name (``formats/test_dcp_remote.py`` serves through
``sources/test_remote.py``'s server), as pytest's prepend import mode puts only the folder
it is collecting there."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for floor in ("sources", "formats", "vocabulary"):
    if str(HERE / floor) not in sys.path:
        sys.path.insert(0, str(HERE / floor))
