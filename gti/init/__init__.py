"""Initialization of the new SID rows: ``gti init``.

``REGISTRY`` maps a strategy name to a function of one keyword-only signature
(:class:`gti.init.context.InitFn`): ``fn(*, old, n_new, generator, context) ->
(n_new, d)``. It is applied to the input embedding and, when the head is untied,
separately to the output head.

``gti`` (grounding) is not in the registry: it is a training stage that needs the
whole model, and it starts from one of these rows (``--start-from``, default
``mean`` as in the paper). ``gti.init.config.STRATEGIES`` is these names plus ``gti``.
A new strategy is a module and a line here and in ``SIGNATURE`` (and, when it needs side
information beyond the old rows, a line in ``NEEDS``).
"""

from __future__ import annotations

from gti.init.codebook import codebook_projection_init
from gti.init.codebook_fit import codebook_lstsq_init
from gti.init.context import InitContext, InitFn, Registry
from gti.init.covariance import full_covariance_init
from gti.init.description import description_mean_init
from gti.init.llamafactory import desc_init, desc_noise_init, noise_init
from gti.init.mean import mean_init, mean_noise_init
from gti.init.random_init import random_init
from gti.init.subword import subword_init

REGISTRY: Registry = {
    "mean": mean_init,
    "mean-noise": mean_noise_init,
    "random": random_init,
    "description-mean": description_mean_init,
    "full-covariance": full_covariance_init,
    "llamafactory-noise": noise_init,
    "llamafactory-desc": desc_init,
    "llamafactory-desc-noise": desc_noise_init,
    "codebook-projection": codebook_projection_init,
    "subword": subword_init,
    "codebook-lstsq": codebook_lstsq_init,
}

# What each strategy's rows look like, in geodiag's words (geodiag.gate.signature): the
# sidecar says it (``init_signature``; a grounded init "trained", with ``start_signature``),
# and geodiag's verdict words its cause from it without knowing the strategy's name.
SIGNATURE: dict[str, str] = {
    "mean": "identical",
    "mean-noise": "near-identical",
    "random": "isotropic-draw",
    "description-mean": "text-average",
    "full-covariance": "vocabulary-draw",
    "llamafactory-noise": "unit-noise",
    "llamafactory-desc": "text-average",
    "llamafactory-desc-noise": "text-average-noise",
    "codebook-projection": "code-projection",
    "subword": "text-average",
    "codebook-lstsq": "code-projection",
}

# What a strategy reads from its InitContext besides the old rows, so that a run loads
# only that: "item_texts" (the catalog), "codebooks", "base_tokenizer".
NEEDS: dict[str, frozenset[str]] = {
    "description-mean": frozenset({"item_texts"}),
    "llamafactory-desc": frozenset({"item_texts"}),
    "llamafactory-desc-noise": frozenset({"item_texts"}),
    "codebook-projection": frozenset({"codebooks"}),
    "subword": frozenset({"base_tokenizer"}),
    "codebook-lstsq": frozenset({"codebooks", "item_texts"}),
}


def needs(strategy: str) -> frozenset[str]:
    return NEEDS.get(strategy, frozenset())


def signature(strategy: str, start_from: str | None = None) -> dict[str, str]:
    """The sidecar's signature fields of an init (``strategy`` "gti": grounded from
    ``start_from``)."""
    if strategy == "gti":
        return {"init_signature": "trained", "start_signature": SIGNATURE[start_from or "mean"]}
    return {"init_signature": SIGNATURE[strategy]}


__all__ = ["NEEDS", "REGISTRY", "SIGNATURE", "InitContext", "InitFn", "needs", "signature"]
