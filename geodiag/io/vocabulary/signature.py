"""What init a sidecar says its new rows are: the init signature, one word of
:data:`SIGNATURES` under ``init_signature`` in the init's provenance (gti writes it for each
strategy of its registry; a grounded init also names its start's, ``start_signature``, and
its steps). Read here as untrusted input: an unknown word is no signature, a strategy name
that is not plain is not kept. The verdict words its cause from the signature
(:mod:`geodiag.gate.signature` adds what the draw's statistics show without a sidecar).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Each signature: what its rows are, as a noun phrase about the draw.
SIGNATURES: dict[str, str] = {
    "identical": "one vector repeated (an exact mean)",
    "near-identical": "rows drawn within a tiny ball around the vocabulary mean",
    "unit-noise": "the vocabulary mean plus N(0, 1/d) per coordinate",
    "isotropic-draw": "rows drawn at random at the vocabulary's scale, blind to its shape",
    "vocabulary-draw": "rows drawn from the vocabulary's own distribution, N(mean, covariance)",
    "text-average": "averages of existing rows read from text (each token's spelling or its "
    "items' descriptions)",
    "text-average-noise": "averages of existing rows read from the items' descriptions, plus "
    "N(0, 1/d) per coordinate",
    "code-projection": "the codebooks' code vectors mapped into the embedding space",
    "trained": "rows trained (grounded) from a start",
}
# Rows that start at one point, and draws that start at random.
COLLAPSED = frozenset({"identical", "near-identical"})
DRAWN = frozenset({"unit-noise", "isotropic-draw", "vocabulary-draw"})
AVERAGED = frozenset({"text-average", "text-average-noise"})
# A strategy's name as a sidecar gives it, shown in the verdict's words only when it is a
# plain name (it is read from a file: never a backtick, a newline or markup).
_PLAIN = re.compile(r"[a-z0-9][a-z0-9+._-]{0,63}")


@dataclass(frozen=True)
class Signature:
    name: str  # a key of SIGNATURES
    source: str  # "sidecar" | "statistics"
    strategy: str | None = None  # the sidecar's own name for its init, when plain
    start: str | None = None  # trained: the start's signature, when the sidecar says it
    steps: int | None = None  # trained: the grounding steps

    @property
    def words(self) -> str:
        """What the rows are, with a trained init's start."""
        if self.name == "trained" and self.start in SIGNATURES:
            return f"rows trained (grounded) from {SIGNATURES[self.start]}"
        return SIGNATURES[self.name]


def _plain(x: object) -> str | None:
    return x if isinstance(x, str) and _PLAIN.fullmatch(x) else None


def _steps(x: object) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else None


# The sidecar format before ``init_signature`` (gti up to 2026-12-06) named only its
# strategy, from this closed set; what each drew, as the field says it now. Frozen: a
# strategy added since writes its signature, and this table never grows.
BEFORE_THE_FIELD: dict[str, str] = {
    "mean": "identical",
    "mean-noise": "near-identical",
    "random": "isotropic-draw",
    "description-mean": "text-average",
    "gti": "trained",
}
BEFORE_THE_FIELD_START = "mean"  # a grounded init of that format started from the mean


def from_provenance(init: dict) -> Signature | None:
    """The signature an init's provenance states (:data:`SIGNATURES`); None when it states
    none this version knows. A sidecar from before the field is read by the format it had
    then (:data:`BEFORE_THE_FIELD`)."""
    name, steps = init.get("init_signature"), _steps(init.get("step"))
    start = init.get("start_signature")
    if "init_signature" not in init and isinstance(init.get("init_strategy"), str):
        name = BEFORE_THE_FIELD.get(init["init_strategy"])
        start = init.get("start_from") or BEFORE_THE_FIELD_START
        start = BEFORE_THE_FIELD.get(start) if isinstance(start, str) else None
    if name not in SIGNATURES:
        return None
    return Signature(
        name,
        "sidecar",
        strategy=_plain(init.get("init_strategy")),
        start=start if name == "trained" and start in SIGNATURES else None,
        steps=steps if name == "trained" else None,
    )
