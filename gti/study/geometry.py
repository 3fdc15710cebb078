"""The geometry of one checkpoint's SID rows, as the study records it at each milestone.

A compact extract of ``geodiag.analysis.checkpoint.analyze`` (the input matrix; SmolLM2 ties
input and output): effective rank (uncentered and centered), spread relative to an
equal-size sample of the original vocabulary, mean pairwise cosine, top-1 energy
share, within/between-level cosine, and per level its effective rank and RSA
against the RQ-VAE codebook (Spearman, permutation p-value, or why undefined). The
uncentered singular values are kept for the spectra plots (768 floats).
"""

from __future__ import annotations

from pathlib import Path

from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.analysis.options import AnalyzeOptions
from geodiag.io.sources.options import ReadOptions


def measure(checkpoint: Path, *, permutations: int, seed: int) -> dict[str, object]:
    """Strict-JSON dict of the figures the study plots, for the new rows of ``checkpoint``."""
    # The geometry alone: no movement, so no reference to open (the init is measured too).
    read = ReadOptions(auto_reference=False)
    report = measure_checkpoint(
        checkpoint, AnalyzeOptions(n_permutations=permutations, seed=seed), read=read
    )
    m = report.matrices[0]
    new = m.new
    levels = {}
    for lv in m.levels:
        levels[lv.name] = {
            "n_tokens": lv.n_tokens,
            "effective_rank": lv.geometry.uncentered.effective_rank,
            "centered_effective_rank": lv.geometry.centered.effective_rank,
            "spread_relative": lv.geometry.spread_relative,
            "mean_cosine": lv.geometry.mean_pairwise_cosine,
            "rsa": None if lv.rsa is None else lv.rsa.spearman,
            "rsa_p": None if lv.rsa is None else lv.rsa.p_value,
            "rsa_undefined": lv.rsa_skip_reason if lv.rsa is None else lv.rsa.undefined_reason,
        }
    lc = m.level_cosine
    return {
        "matrix": m.tensor,
        "n_new": m.n_new,
        "dim": m.dim,
        "effective_rank": new.uncentered.effective_rank,
        "centered_effective_rank": new.centered.effective_rank,
        "reference_effective_rank": m.reference.uncentered.effective_rank,
        "spread_relative": new.spread_relative,
        "mean_cosine": new.mean_pairwise_cosine,
        "top1_energy_share": new.uncentered.top1_energy_share,
        "within_level_cosine": None if lc is None else lc.within_mean,
        "between_level_cosine": None if lc is None else lc.between_mean,
        "levels": levels,
        "singular_values": [round(s, 6) for s in new.uncentered.singular_values],
        "reference_singular_values": [round(s, 6) for s in m.reference.uncentered.singular_values],
    }
