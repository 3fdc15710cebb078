"""What every row-init strategy receives besides the original rows: one signature
for all of them (``gti.init.REGISTRY``), whatever subset each one uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np
    import torch
    from transformers import PreTrainedTokenizerBase

    from geodiag.io.vocabulary.sidecar import SemanticIds


@dataclass
class InitContext:
    """Side information for strategies that need more than the old rows."""

    sids: SemanticIds | None = None
    # item id -> the rendered item text (the catalog's ``Item.text``).
    item_texts: dict[str, str] = field(default_factory=dict)
    # The extended tokenizer; only ids < base_vocab_size are used from item texts.
    tokenizer: PreTrainedTokenizerBase | None = None
    # item id -> its new tokens as positions among the new rows; None: from ``sids``
    # (level offset + code). The drop-in route (gti.dropin) gives it for a framework's index.
    item_slots: dict[str, tuple[int, ...]] | None = None
    matrix: str = "input"  # "input" | "output": which matrix the rows are for
    # The original rows of the input embedding (V, d), whichever matrix is being filled:
    # LLaMA-Factory's desc_init averages input-embedding rows for the untied head too.
    input_rows: torch.Tensor | None = None
    # The RQ-VAE codebooks, one (codes, code_dim) array per level, and each new row's
    # (level, code) (None: a token with no code vector); row_codes None: from ``sids``.
    codebooks: list[np.ndarray] | None = None
    row_codes: list[tuple[int, int] | None] | None = None
    # The new tokens' strings in row order, and the tokenizer as it was before they were
    # added (how the backbone itself would split those strings).
    new_tokens: list[str] | None = None
    base_tokenizer: PreTrainedTokenizerBase | None = None
    # A user's own descriptions of new tokens (token string -> text), as LLaMA-Factory's
    # new_special_tokens_config: llamafactory-desc uses them over the items' texts.
    descriptions: dict[str, str] | None = None


class InitFn(Protocol):
    def __call__(
        self,
        *,
        old: torch.Tensor,  # (V, d) original rows
        n_new: int,
        generator: torch.Generator,
        context: InitContext,
    ) -> torch.Tensor:  # (n_new, d), dtype of old
        ...


Registry = dict[str, Callable[..., "torch.Tensor"]]
