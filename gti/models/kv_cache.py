"""The key/value cache across transformers versions: transformers 5 renamed the forward
argument and the output field ``past_key_values`` to ``cache`` (the old name warns).
Grounding, its structure probe and the constrained decoder all pass a cache forward."""

from __future__ import annotations

import inspect

from torch import nn


def cache_kwarg(model: nn.Module) -> str:
    """The name ``model.forward`` takes its cache by."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_of(output: object) -> object:
    """The cache a forward pass returned."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values  # type: ignore[attr-defined]
