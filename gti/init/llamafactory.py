"""LLaMA-Factory's new-token inits, as ``src/llamafactory/model/model_utils/embedding.py``
computes them (``init_special_tokens: noise_init | desc_init | desc_init_w_noise``).

- ``llamafactory-noise`` (``_noisy_mean_initialization``, their default): the mean of the
  existing rows plus N(0, std 1/sqrt(d)) per entry, drawn and added in the matrix's dtype.
  Their "existing rows" are every row but the new tokens', which after their resize to a
  multiple of 64 includes the padding rows; here they are the original rows only.
- ``llamafactory-desc`` (``_description_based_initialization``): each new token's row =
  the mean of the *input-embedding* rows of its description's tokens (tokenized without
  special tokens, new tokens left out), for the untied head as well; a description with no
  such token gets the mean of the existing rows of the matrix being filled.
  ``llamafactory-desc-noise`` adds N(0, std 1/sqrt(d)) to each row, as their
  ``desc_init_w_noise`` (one draw of d entries per token, in token order).

LLaMA-Factory takes one hand-written description per token (``new_special_tokens_config``,
a YAML file {token: description}); ``--descriptions FILE`` takes the same file. A SID token
it does not describe is described by the texts of the items that carry it, one per line.
That is not ``description-mean``: that one averages per item first (each item weighs the
same, whatever its length), uses the matrix's own rows for an untied head and falls back
to the mean of the item vectors.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from geodiag.errors import InputError
from gti.init.context import InitContext
from gti.init.description import item_slots, items_with_text

if TYPE_CHECKING:
    import torch


def noise_init(
    *, old: torch.Tensor, n_new: int, generator: torch.Generator, context: InitContext
) -> torch.Tensor:
    """mean(old) + N(0, 1/d) per entry: (n_new, d), dtype of ``old``."""
    import torch

    d = old.shape[1]
    avg = old.mean(dim=0, keepdim=True)  # (1, d)
    noise = torch.empty(n_new, d, dtype=old.dtype).normal_(
        0, 1.0 / math.sqrt(d), generator=generator
    )
    return avg + noise


def read_descriptions(path: Path) -> dict[str, str]:
    """A YAML or JSON file {token: description}, as LLaMA-Factory's new_special_tokens_config."""
    import yaml  # a dependency of transformers

    if not path.is_file():
        raise InputError("--descriptions", f"{path}: file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise InputError("--descriptions", f"{path} is not YAML or JSON: {e}") from e
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise InputError(
            "--descriptions", f"{path}: expected a mapping of token strings to description texts"
        )
    return data


def descriptions(context: InitContext, n_new: int) -> list[str]:
    """Each new token's description: the user's (``context.descriptions``) where given, else
    the texts of the items that carry it, one per line ("" where no item with text does)."""
    items = items_with_text(context)
    lines: list[list[str]] = [[] for _ in range(n_new)]
    for item, slots in zip(items, item_slots(context, items), strict=True):
        for s in slots:
            lines[s].append(context.item_texts[item])
    out = ["\n".join(texts) for texts in lines]
    if context.descriptions:
        tokens = context.new_tokens or []
        unknown = sorted(set(context.descriptions) - set(tokens))
        if unknown:
            raise InputError(
                "--descriptions",
                f"{len(unknown)} described token(s) are not new tokens of this run "
                f"(e.g. {unknown[0]!r}); describe the SID tokens as they are spelled",
            )
        out = [context.descriptions.get(t, text) for t, text in zip(tokens, out, strict=True)]
    return out


def _desc_rows(old: torch.Tensor, n_new: int, context: InitContext) -> torch.Tensor:
    import torch

    inputs = context.input_rows if context.input_rows is not None else old  # (V, d)
    fallback = old.mean(dim=0)  # (d,): the matrix being filled, as theirs
    rows = []
    for text in descriptions(context, n_new):
        ids = context.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []  # type: ignore[misc]
        valid = [t for t in ids if t < inputs.shape[0]]  # new tokens are ids >= V
        rows.append(inputs[torch.tensor(valid)].mean(dim=0) if valid else fallback)
    return torch.stack(rows).to(old.dtype)  # (n_new, d)


def desc_init(
    *, old: torch.Tensor, n_new: int, generator: torch.Generator, context: InitContext
) -> torch.Tensor:
    """Mean input-embedding row of each token's description: (n_new, d)."""
    return _desc_rows(old, n_new, context)


def desc_noise_init(
    *, old: torch.Tensor, n_new: int, generator: torch.Generator, context: InitContext
) -> torch.Tensor:
    """``desc_init`` plus N(0, 1/d) per entry, one draw of d per token in order."""
    import torch

    rows = _desc_rows(old, n_new, context)
    scale = 1.0 / math.sqrt(old.shape[1])
    for k in range(n_new):
        rows[k] += torch.randn(old.shape[1], generator=generator, dtype=old.dtype) * scale
    return rows
