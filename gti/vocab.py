"""Vocabulary extension: one new token per (level, code) of the semantic IDs.

Tokens are named ``<a_0> .. <a_255>, <b_0> ..`` (``geodiag.io.vocabulary.sidecar.token_string``),
added to the tokenizer as plain (non-special) added tokens so they survive
decoding, and given rows in the model by ``resize_token_embeddings``. The rows are
left for an init strategy to fill (``mean_resizing=False``: transformers' own mean
init would silently be the ``mean-noise`` strategy). Tied and untied output heads
are both supported; an untied head gets its own new rows.

``pad_to_multiple_of``: the embedding is padded to a multiple of N rows (tensor-core
friendly shapes, as training frameworks do). The padding rows are not new tokens: no
tokenizer id reaches them, ``new_token_ids`` (and the sidecar) name only the SID rows,
and they are zero in the input embedding and the head: they carry nothing (a zero
logit, which sampling can still reach; a decoder constrained to the SIDs never does), and
geodiag reads them as a padded vocabulary's unused rows past the tokenizer.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from tokenizers import AddedToken
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from geodiag.errors import InputError
from geodiag.io.vocabulary.sidecar import SemanticIds


@dataclass(frozen=True)
class VocabExtension:
    """Where the new tokens live after :func:`extend_vocabulary`."""

    # Rows [0, base_vocab_size) are the original vocabulary. Padding rows beyond the
    # tokenizer (the base's, as Qwen's, or --pad-vocab-to-multiple-of's) are neither
    # original nor new: they stay out of the statistics and out of new_token_ids.
    base_vocab_size: int
    new_token_ids: tuple[int, ...]  # in (level, code) order, as sids.token_strings()
    tied: bool
    # Rows of the embedding before the extension: new ids at or past it cannot sit on a
    # padding row the base already had (geodiag's on_padding note; None: not known).
    base_rows: int | None = None

    @property
    def n_new(self) -> int:
        return len(self.new_token_ids)

    def ids_tensor(self, device: torch.device | str = "cpu") -> torch.Tensor:
        return torch.tensor(self.new_token_ids, dtype=torch.long, device=device)  # (n_new,)


def is_tied(model: PreTrainedModel) -> bool:
    out = model.get_output_embeddings()
    return out is None or out.weight is model.get_input_embeddings().weight


def extend_vocabulary(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sids: SemanticIds,
    *,
    pad_to_multiple_of: int = 0,
) -> VocabExtension:
    """Add the SID tokens to ``tokenizer`` and rows for them to ``model``, in place."""
    return add_new_tokens(
        model, tokenizer, sids.token_strings(), pad_to_multiple_of=pad_to_multiple_of
    )


def add_new_tokens(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    tokens: list[str],
    *,
    as_strings: bool = False,
    pad_to_multiple_of: int = 0,
) -> VocabExtension:
    """Add ``tokens`` (spelled as given) to ``tokenizer`` and rows for them to ``model``, in
    place; ``new_token_ids`` follow the order of ``tokens``.

    ``as_strings``: add them as ``tokenizer.add_tokens(["<a_1>", ...])`` does (transformers'
    flags for a plain string), so that a framework's own ``add_tokens`` of the same strings
    finds each one identical and adds 0; an ``AddedToken`` with other flags would be added
    again (same id, but counted), which is what the drop-in route must avoid.

    ``pad_to_multiple_of`` N > 0: the embedding gets a multiple of N rows; the rows past
    the tokenizer that no token has are set to zero (0: exactly the tokenizer's length)."""
    vocab = tokenizer.get_vocab()
    clash = [t for t in tokens if t in vocab]
    if clash:
        raise InputError(
            "--model",
            f"the tokenizer already has {len(clash)} SID token(s) (e.g. {clash[0]}); "
            "start from a backbone without semantic-ID tokens",
        )
    n_rows = model.get_input_embeddings().weight.shape[0]
    base = min(len(tokenizer), n_rows)
    # normalized=False: match the raw text, whatever the tokenizer's normalizer does.
    added = tokenizer.add_tokens(
        list(tokens)
        if as_strings
        else [AddedToken(t, normalized=False, special=False, single_word=False) for t in tokens]
    )
    if added != len(tokens):
        raise RuntimeError(f"tokenizer added {added} of {len(tokens)} SID tokens")
    ids = tokenizer.convert_tokens_to_ids(tokens)
    if len(set(ids)) != len(ids) or min(ids) < base:
        raise RuntimeError(f"SID token ids overlap the original vocabulary (first {ids[:3]})")
    probe = "".join(tokens[: min(len(tokens), 8)])
    if tokenizer(probe, add_special_tokens=False)["input_ids"] != ids[: min(len(tokens), 8)]:
        raise RuntimeError(f"the tokenizer does not split {probe!r} into the SID tokens")
    # Never shrink: rows past the tokenizer (padding rows) stay where they are.
    needed = max(n_rows, len(tokenizer))
    model.resize_token_embeddings(
        needed, pad_to_multiple_of=pad_to_multiple_of or None, mean_resizing=False
    )
    zero_padding_rows(model, n_old=needed)
    return VocabExtension(
        base_vocab_size=base, new_token_ids=tuple(ids), tied=is_tied(model), base_rows=n_rows
    )


def zero_padding_rows(model: PreTrainedModel, n_old: int) -> None:
    """Zero the rows ``[n_old, n_rows)`` that resizing added past the tokenizer (padding:
    transformers fills them with its random init), in the embedding and an untied head."""
    weights = [model.get_input_embeddings().weight]
    if not is_tied(model):
        weights.append(model.get_output_embeddings().weight)
    with torch.no_grad():
        for w in weights:
            w[n_old:] = 0
    head = model.get_output_embeddings()
    if head is not None and getattr(head, "bias", None) is not None:
        with torch.no_grad():
            head.bias[n_old:] = 0


def with_token_ids(sids: SemanticIds, ext: VocabExtension) -> SemanticIds:
    """A copy of ``sids`` whose levels record the token ids (code order)."""
    out = copy.deepcopy(sids)
    it = iter(ext.new_token_ids)
    for level in out.levels:
        level.token_ids = [next(it) for _ in range(level.size)]
    out.base_vocab_size = ext.base_vocab_size
    return out


def new_rows(model: PreTrainedModel, ext: VocabExtension, matrix: str) -> torch.Tensor:
    """The new rows of the input embedding or the output head (a view), (n_new, d)."""
    weight = _weight(model, matrix)
    return weight.detach()[ext.ids_tensor(weight.device)]


def old_rows(model: PreTrainedModel, ext: VocabExtension, matrix: str) -> torch.Tensor:
    """The original rows, (base_vocab_size, d)."""
    return _weight(model, matrix).detach()[: ext.base_vocab_size]


def set_new_rows(
    model: PreTrainedModel, ext: VocabExtension, matrix: str, rows: torch.Tensor
) -> None:
    """Write ``rows`` (n_new, d) into the new rows of ``matrix``, in place."""
    weight = _weight(model, matrix)
    if rows.shape != (ext.n_new, weight.shape[1]):
        raise ValueError(f"rows {tuple(rows.shape)} != ({ext.n_new}, {weight.shape[1]})")
    with torch.no_grad():
        weight[ext.ids_tensor(weight.device)] = rows.to(device=weight.device, dtype=weight.dtype)


def _weight(model: PreTrainedModel, matrix: str) -> torch.Tensor:
    if matrix == "input":
        return model.get_input_embeddings().weight
    if matrix == "output":
        return model.get_output_embeddings().weight
    raise ValueError(f"matrix must be 'input' or 'output', got {matrix!r}")
