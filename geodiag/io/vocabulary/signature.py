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


def from_provenance(init: dict) -> Signature | None:
    """The signature an init's provenance states (:data:`SIGNATURES`); None when it states
    none this version knows. A sidecar from before the field says what can be read without
    it: an init that names grounding steps was trained."""
    name, steps = init.get("init_signature"), _steps(init.get("step"))
    if name not in SIGNATURES:
        if "init_signature" in init or init.get("stage") != "init" or not steps:
            return None
        name = "trained"  # an older sidecar: an init that names grounding steps trained
    start = init.get("start_signature") if name == "trained" else None
    return Signature(
        name,
        "sidecar",
        strategy=_plain(init.get("init_strategy")),
        start=start if start in SIGNATURES else None,
        steps=steps if name == "trained" else None,
    )
