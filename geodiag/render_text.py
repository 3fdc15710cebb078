"""Plain-text tables of results for the terminal (formatting only: nothing is computed here)."""

from __future__ import annotations

from geodiag.analysis import CheckpointReport, DriftReport


def _f(x: float | None, digits: int = 4) -> str:
    return "undefined" if x is None else f"{x:.{digits}g}"


def metrics_table(report: CheckpointReport) -> str:
    lines = [
        f"checkpoint   {report.path}  ({report.store})",
        f"new tokens   {report.n_new_tokens} (from {report.new_token_source}); "
        f"original rows [0, {report.base_vocab_size}); "
        f"levels: {', '.join(report.level_names) or 'none'}"
        + (f" (from {report.levels_source})" if report.levels_source else ""),
    ]
    if report.provenance:
        lines.append("provenance   " + ", ".join(f"{k}={v}" for k, v in report.provenance.items()))
    for m in report.matrices:
        lines += ["", f"[{m.role}] {m.tensor}  {m.dtype}  {m.n_rows} x {m.dim}"]
        rows = [
            ("", "new tokens", "vocab reference"),
            ("rows", str(m.n_new), str(m.reference_size)),
            ("effective rank (centered)", _f(m.new.centered.effective_rank), _f(m.reference.centered.effective_rank)),
            ("  ratio to min(n, d)", _f(m.new.centered.effective_rank_ratio), _f(m.reference.centered.effective_rank_ratio)),
            ("effective rank (uncentered)", _f(m.new.uncentered.effective_rank), _f(m.reference.uncentered.effective_rank)),
            ("stable rank (centered)", _f(m.new.centered.stable_rank), _f(m.reference.centered.stable_rank)),
            ("participation ratio (centered)", _f(m.new.centered.participation_ratio), _f(m.reference.centered.participation_ratio)),
            ("top-1 energy share (uncentered)", _f(m.new.uncentered.top1_energy_share), _f(m.reference.uncentered.top1_energy_share)),
            ("mean pairwise cosine", _f(m.new.mean_pairwise_cosine), _f(m.reference.mean_pairwise_cosine)),
            ("row norm mean (std)", f"{_f(m.new.row_norms.mean)} ({_f(m.new.row_norms.std)})",
             f"{_f(m.reference.row_norms.mean)} ({_f(m.reference.row_norms.std)})"),
            ("spread (RMS to centroid)", _f(m.new.spread), _f(m.reference.spread)),
            ("spread relative to vocabulary", _f(m.new.spread_relative), "1"),
        ]  # fmt: skip
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        lines += [f"  {a:<{w0}}  {b:>{w1}}  {c}" for a, b, c in rows]
        if m.nonfinite_rows_dropped:
            lines.append(f"  ({m.nonfinite_rows_dropped} non-finite rows dropped)")
        if m.levels:
            lines.append(
                "  per level: tokens, eff. rank (centered), mean cosine, RSA vs codebook (p)"
            )
            for lv in m.levels:
                if lv.rsa is None:
                    rsa = f"skipped ({lv.rsa_skip_reason})"
                elif lv.rsa.spearman is None:
                    rsa = f"undefined ({lv.rsa.undefined_reason})"
                else:
                    rsa = f"{lv.rsa.spearman:.3f} (p={_f(lv.rsa.p_value, 3)})"
                g = lv.geometry
                lines.append(
                    f"    {lv.name:<4} {lv.n_tokens:>7}  {_f(g.centered.effective_rank):>9}  "
                    f"{_f(g.mean_pairwise_cosine):>9}  {rsa}"
                )
        if m.level_cosine is not None:
            lines.append(
                f"  cosine within levels {_f(m.level_cosine.within_mean)}, "
                f"between levels {_f(m.level_cosine.between_mean)}"
            )
        if m.neighbors:
            lines.append("  nearest original tokens (first 5 new tokens):")
            for tn in m.neighbors[:5]:
                near = ", ".join(f"{n.token!r} {n.cosine:.2f}" for n in tn.nearest)
                lines.append(f"    {tn.token}: {near}")
    for note in report.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def drift_table(reports: list[DriftReport]) -> str:
    lines = []
    for r in reports:
        d = r.drift
        rsa = d.structure_rsa
        rsa_s = (
            "undefined" if rsa.spearman is None else f"{rsa.spearman:.3f} (p={_f(rsa.p_value, 3)})"
        )
        lines += [
            f"[{r.matrix}] {r.before} -> {r.after}: {r.n_tokens} tokens",
            f"  per-token cosine: mean {_f(d.cosine_mean)}, median {_f(d.cosine_median)}, min {_f(d.cosine_min)}",
            f"  relative change ||after - before|| / ||before||: {_f(d.relative_change)}",
            f"  structure RSA (before vs after dissimilarities): {rsa_s}",
        ]
        for name, lv in r.levels.items():
            lrsa = lv.structure_rsa
            lrsa_s = "undefined" if lrsa.spearman is None else f"{lrsa.spearman:.3f}"
            lines.append(
                f"    level {name}: cosine mean {_f(lv.cosine_mean)}, structure RSA {lrsa_s}"
            )
    return "\n".join(lines)
