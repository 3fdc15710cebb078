"""What init a set of new rows looks like: its signature, in the words the verdict uses.

Two sources, and never an init strategy's name in this code:

- the sidecar (:mod:`geodiag.io.vocabulary.signature`): whoever wrote the checkpoint says
  what its init drew;
- the draw's statistics, for checkpoints without one (:func:`fingerprint`): identical rows
  (an exact mean: Unsloth's ``add_new_tokens`` default); a spread ~3e-5 of the vocabulary's
  (transformers' ``mean_resizing``: N(mean, 1e-9 Sigma), sqrt(1e-9) = 3.2e-5); an isotropic
  spread of ~1 in embedding units (LLaMA-Factory's ``noise_init``: the mean plus N(0, 1/d)
  per coordinate, so E||x - mean||^2 = d * 1/d = 1).

The other signatures (a draw from the vocabulary's distribution or an isotropic one, averages
of existing rows, projected code vectors) leave no statistic a verdict could rest on by itself
(an isotropic draw and a full-covariance one differ only in the shape of a spectrum the
vocabulary's own varies), so only a sidecar names them.
"""

from __future__ import annotations

from geodiag.analysis.reports import MatrixReport
from geodiag.io.vocabulary.signature import (
    AVERAGED,
    COLLAPSED,
    DRAWN,
    SIGNATURES,
    Signature,
    from_provenance,
)

__all__ = [
    "AVERAGED",
    "COLLAPSED",
    "DRAWN",
    "SIGNATURES",
    "Signature",
    "fingerprint",
    "from_provenance",
]


def fingerprint(m: MatrixReport) -> str | None:
    """The signature the draw's statistics show (module docstring): identical,
    near-identical, unit-noise; None when they show none."""
    g = m.new
    if g.spread == 0:
        return "identical"
    if g.spread_relative is not None and 1e-5 <= g.spread_relative <= 1e-4:
        return "near-identical"
    expected = ((m.n_new - 1) / m.n_new) ** 0.5  # RMS distance to the sample mean
    if m.n_new > 1 and abs(g.spread - expected) < 0.1 and g.centered.effective_rank_ratio > 0.5:
        return "unit-noise"
    return None
