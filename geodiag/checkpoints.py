"""Old import path of :mod:`geodiag.io.checkpoint`, kept because gti and scripts outside
this repository imported it (``from geodiag.checkpoints import open_checkpoint``).
New code imports from ``geodiag.io``."""

from geodiag.io.checkpoint import Checkpoint, Matrix, check_rows, open_checkpoint
from geodiag.io.new_tokens import NewTokens
from geodiag.io.options import ReadOptions

__all__ = ["Checkpoint", "Matrix", "NewTokens", "ReadOptions", "check_rows", "open_checkpoint"]
