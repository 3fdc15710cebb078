"""The words a diagnosis is made of: a cause and a remedy (:class:`Advice`), a matrix's
sentence (:class:`Diagnosis`), and the remedy every collapse falls back on (grounding with
gti). Below the check units (:mod:`geodiag.gate.checks`), which say their own remedies, and
the verdict (:mod:`geodiag.gate.verdict`), which picks one per matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

GTI = "`gti init --strategy gti`"
GROUND = f"ground them with {GTI}"
PAPER_GROUNDING = "8,000 steps x 128 examples"


@dataclass(frozen=True)
class Advice:
    """Why the rows look as they do (None: nothing the files tell), and what to do;
    ``signature``: the init the sidecar says the rows are (:mod:`geodiag.gate.signature`),
    so a check's diagnosis does not guess another."""

    cause: str | None
    remedy: str | None
    signature: str | None = None

    @property
    def text(self) -> str:
        """Both, as a sentence says them: "cause; remedy"."""
        return "; ".join(s for s in (self.cause, self.remedy) if s)


@dataclass(frozen=True)
class Diagnosis:
    """One matrix's diagnosis: the sentence, and the cause and remedy it names (the same
    strings: the sentence is made of them)."""

    sentence: str
    cause: str | None = None
    remedy: str | None = None


def diagnosis(head: str, advice: Advice, sep: str = "; ") -> Diagnosis:
    """``head``, then the advice: "head; cause; remedy."."""
    rest = advice.text
    return Diagnosis(f"{head}{sep}{rest}." if rest else f"{head}.", advice.cause, advice.remedy)


def g(x: float | None, digits: int = 3) -> str:
    """A figure as a sentence shows it: ``digits`` significant digits, or "undefined"."""
    return "undefined" if x is None else f"{x:.{digits}g}"
