"""What the callback does on a rank that does not measure: join the collectives.

Under DeepSpeed ZeRO-3 or FSDP2 the embedding is partitioned, and gathering it is a
collective: every process must enter it, or the main process waits for ever. The other
ranks enter the gather (:func:`geodiag.io.formats.memory.gathered`) and leave it at once.
"""

from __future__ import annotations

from geodiag.errors import InputError


def partitioned(model) -> bool:
    """Whether ``model``'s embedding is partitioned across processes (ZeRO-3, FSDP2)."""
    from geodiag.io.formats.memory import fsdp_owners, partitioned_embeddings

    try:
        return bool(partitioned_embeddings(model)) or bool(fsdp_owners(model))
    except AttributeError:
        return False


def join_gather(model) -> None:
    """Enter and leave the gather of ``model``'s embedding that the main process makes to
    measure it (a collective); a gather that cannot be made is the main process's to say."""
    from geodiag.io.formats.memory import gathered

    try:
        with gathered(model):
            pass
    except InputError:
        pass
