"""``geodiag check`` of a drop-in output, against the framework's codebooks when given:
the levels are the index's (its tokens parsed by geodiag's SID readers), the codebook
rows those of the codes the index uses."""

from __future__ import annotations

from pathlib import Path

from geodiag.api import check
from geodiag.gate.outputs import text_summary
from geodiag.jsonio import to_jsonable
from gti.dropin.index import IndexTokens


def gate_of(
    folder: Path, shown_as: Path, model, tokenizer, index: IndexTokens
) -> tuple[str, object]:
    """(the terminal summary, the result as JSON) of the gate on the written ``folder``."""
    token_ids = dict(zip(index.tokens, tokenizer.convert_tokens_to_ids(index.tokens), strict=True))
    levels = index.levels(token_ids) or None
    books = index.level_books() if levels else None
    result = check(folder, levels=levels, codebooks=books)
    result.path = str(shown_as)
    return text_summary(result), to_jsonable(result)
