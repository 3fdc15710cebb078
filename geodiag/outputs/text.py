"""Plain-text tables of results for the terminal (formatting only: nothing is computed here).

Each table is a list of lines joined by :func:`~geodiag.escape.terminal_lines`: token
strings, level names and provenance keys come from files, and a newline or ESC in one
must not start a line of its own or reach the terminal.
"""

from __future__ import annotations

from geodiag.analysis.findings import ITEM_IDS
from geodiag.analysis.reports import CheckpointReport, DriftReport, MatrixReport
from geodiag.escape import terminal_lines
from geodiag.io.vocabulary.tokenizer import list_names


def _f(x: float | None, digits: int = 4) -> str:
    return "undefined" if x is None else f"{x:.{digits}g}"


def provenance_lines(provenance: dict, indent: str = "") -> list[str]:
    """A sidecar's provenance as readable lines: scalars as ``key value``, nested records
    (the sids build under an init, the init under an SFT) each under their own heading."""
    scalars = [(k, v) for k, v in provenance.items() if not isinstance(v, dict)]
    nested = [(k, v) for k, v in provenance.items() if isinstance(v, dict)]
    lines = []
    if scalars:
        lines.append(indent + ", ".join(f"{k} {_value(v)}" for k, v in scalars))
    for key, sub in nested:
        lines.append(f"{indent}{key.replace('_provenance', '')}:")
        lines += provenance_lines(sub, indent + "  ")
    return lines


def _value(v: object) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def metrics_table(report: CheckpointReport) -> str:
    lines = [
        f"checkpoint   {report.path}  ({report.store})",
        f"new tokens   {report.n_new_tokens} (from {report.new_token_source}); "
        + (
            f"original rows [0, {report.base_vocab_size}); "
            if report.base_vocab_size
            else "no original vocabulary; "
        )
        + f"levels: {', '.join(report.level_names) or 'none'}"
        + (f" (from {report.levels_source})" if report.levels_source else ""),
    ]
    if report.adapter:
        a = report.adapter
        changes = "; ".join(f"{k}: {v}" for k, v in a["embedding_changes"].items()) or "none"
        lines.append(f"adapter      {a['peft_type']} over {a['base']} ({changes})")
    if report.provenance:
        prov = provenance_lines(report.provenance)
        lines.append("provenance   " + prov[0].strip())
        lines += ["             " + line for line in prov[1:]]
    for m in report.matrices:
        lines += ["", f"[{m.role}] {m.tensor}  {m.dtype}  {m.n_rows} x {m.dim}"]
        rows = _metric_rows(m)
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        lines += [f"  {a:<{w0}}  {b:>{w1}}  {c}" for a, b, c in rows]
        if m.reference_undefined_reason:
            lines.append(f"  (vocabulary reference undefined: {m.reference_undefined_reason})")
        lines += _matrix_details(m, said=set(report.notes))
    lines += codebook_lines(report)
    lines += integrity_lines(report)
    for note in report.notes:
        lines.append(f"note: {note}")
    return terminal_lines(lines)


def integrity_lines(report: CheckpointReport) -> list[str]:
    """One line per integrity finding (the vocabulary audit's among them), unescaped: the
    caller's sink escapes (``terminal_lines``)."""
    return [f"{'warning' if f.status == 'warn' else 'note'}: {f.message}" for f in report.integrity]


def _metric_rows(m: MatrixReport) -> list[tuple[str, str, str]]:
    ref = m.reference

    def norms(g) -> str:
        return f"{_f(g.row_norms.mean)} ({_f(g.row_norms.std)})"

    # (label, the figure of a GeometrySummary): the same figure for the new rows and for
    # the vocabulary reference, which is undefined without a vocabulary.
    figures = [
        ("effective rank (centered)", lambda g: _f(g.centered.effective_rank)),
        ("  ratio to min(n, d)", lambda g: _f(g.centered.effective_rank_ratio)),
        ("effective rank (uncentered)", lambda g: _f(g.uncentered.effective_rank)),
        ("stable rank (centered)", lambda g: _f(g.centered.stable_rank)),
        ("participation ratio (centered)", lambda g: _f(g.centered.participation_ratio)),
        ("top-1 energy share (uncentered)", lambda g: _f(g.uncentered.top1_energy_share)),
        ("mean pairwise cosine", lambda g: _f(g.mean_pairwise_cosine)),
        ("row norm mean (std)", norms),
        ("spread (RMS to centroid)", lambda g: _f(g.spread)),
    ]
    return [
        ("", "new tokens", "vocab reference"),
        ("rows", str(m.n_new), str(m.reference_size)),
        *[(label, get(m.new), "undefined" if ref is None else get(ref)) for label, get in figures],
        (
            "spread relative to vocabulary",
            _f(m.new.spread_relative),
            "undefined" if ref is None else "1",
        ),
    ]


def _untrained_lines(m: MatrixReport) -> list[str]:
    """Rows still at their init, by finding, with the tokens named."""
    u = m.untrained
    if u is None:
        return []
    lines = [
        f"  untrained rows: {u.n_untrained} of {m.n_new} (one point: closer than "
        f"{_f(u.tolerance)} = {u.tolerance_rule})"
    ]

    for g in u.groups:  # "identical" up to the tolerance, named: the rows may differ within it
        lines.append(f"    {g.size} rows identical within {_f(u.tolerance, 2)}: {g.listed()}")
    if u.n_groups > len(u.groups):
        lines.append(f"    ... and {u.n_groups - len(u.groups)} more group(s)")
    if u.at_vocabulary_mean is not None:
        g = u.at_vocabulary_mean
        lines.append(f"    {g.size} at the vocabulary mean: {g.listed()}")
    if u.zero is not None:
        lines.append(f"    {u.zero.size} all zero: {u.zero.listed()}")
    if u.unchanged_padding is not None:
        g = u.unchanged_padding
        lines.append(f"    {g.size} on the base's padding rows, unchanged: {g.listed()}")
    if u.movement is not None:
        mv = u.movement
        since = f"the reference: {mv.reference}" if mv.reference else "the reference"
        lines.append(
            f"    {u.barely_moved.size if u.barely_moved else 0} barely moved since {since} "
            f"(less than {_f(mv.threshold)}: {mv.rule}; median movement of the original rows "
            f"{_f(mv.median_original)}, of the new rows {_f(mv.median_new)})"
        )
        if u.barely_moved is not None:
            lines.append(f"      {u.barely_moved.listed()}")
    for g, what in ((u.norm_small, "norm too small"), (u.norm_large, "norm too large")):
        if g is not None:
            lines.append(f"  {g.size} new rows with a {what} ({u.norm_rule}): {g.listed()}")
    lines += _no_before_lines(u)
    if u.suspected is not None:
        lines.append(
            f"  suspected by statistics alone (not counted): {u.suspected.size}: "
            f"{u.suspected.listed()}"
        )
    if m.norm_ratio is not None:
        lines.append(f"  longest new row / longest original row: {_f(m.norm_ratio)}")
    lines += _usage_lines(u)
    lines += _token_lines(u)
    return lines


def _no_before_lines(u) -> list[str]:
    """The under-trained indicator and the initializer's-draw test (no before needed)."""
    lines = []
    ind = u.indicator
    if ind is not None:
        head = (
            f"  under-trained indicator ({ind.indicator}) against {ind.n_unused} rows marked "
            f"unused ({', '.join(ind.unused_sources)})"
        )
        if not ind.judged:
            lines.append(f"{head}: cannot tell ({ind.reason})")
        else:
            lines.append(
                f"{head}: cut {_f(ind.cut, 3)} (median: unused {_f(ind.unused_median, 3)}, "
                f"other rows {_f(ind.vocabulary_median, 3)}; {ind.vocabulary_above:.2%} of "
                f"the sampled other rows past it); {ind.n_flagged} new rows past it"
            )
    d = u.draw
    if d is not None:
        what = {
            None: "not a draw (they carry the vocabulary's anisotropy)",
            "initializer": "they look like the model's initializer's draw (a statistic)",
            "noise": "they look like noise around the vocabulary mean (a statistic)",
            "isotropic": "they look like an isotropic draw of no explained scale "
            "(--reference INIT tells)",
        }[d.kind]
        if d.structure:
            what = f"not a draw: they carry the codebook's structure ({d.structure})"
        lines.append(
            f"  as a set: {what}; {d.share:.3g} of their energy in the vocabulary's top "
            f"directions, a draw's {d.expected:.3g} (p = {d.p_isotropic:.2g})"
        )
    return lines


def _usage_lines(u) -> list[str]:
    """Which untrained rows something feeds (geodiag.io.usage, the item IDs)."""
    if not u.usage_sources:
        return []
    lines = [f"  untrained rows by use ({', '.join(u.usage_sources)}):"]
    for g, what in (
        (u.untrained_used, "used"),
        (u.untrained_unused, "nothing feeds them"),
        (u.untrained_usage_unknown, "no source says"),
    ):
        if g is not None:
            lines.append(f"    {g.size} {what}: {g.listed()}")
    return lines


SHOWN_TOKEN_LINES = 10  # flagged tokens printed one per line (all are in --json)
SHOWN_NEIGHBOUR_TOKENS = 5  # new tokens whose nearest originals the table prints (all: --json)


def _token_lines(u) -> list[str]:
    """The first flagged tokens, one per line: id, token, code and item count, findings."""
    if not u.tokens:
        return []
    moved = {"reference": "moved", "vocabulary mean": "from mean"}.get(u.movement_basis or "")
    lines = [f"  flagged tokens: {u.n_flagged} (first {min(SHOWN_TOKEN_LINES, u.n_flagged)}):"]
    for t in u.tokens[:SHOWN_TOKEN_LINES]:
        items = "" if t.n_items is None else f"  {t.n_items} item(s)"
        dist = "" if t.movement is None or moved is None else f"  {moved} {_f(t.movement, 3)}"
        fed = "".join(
            f"  {c}x {name}" for name, c in t.used_by.items() if name != ITEM_IDS
        )  # the item count is shown already
        ind = (
            ""
            if t.indicator is None
            else f"  indicator {_f(t.indicator, 3)} (top {t.indicator_rank:.2%} of the other rows)"
        )
        lines.append(f"    {t.id:>8}  {t.token}{items}{dist}{fed}{ind}: {', '.join(t.findings)}")
    if u.usage_movement:
        lines.append(f"  by items per code (untrained / tokens, median {moved or 'movement'}):")
        lines.append(
            "    "
            + "; ".join(
                f"{_range(b.min_items, b.max_items)}: {b.n_untrained}/{b.n_tokens}, "
                f"{_f(b.median_movement, 3)}"
                for b in u.usage_movement
            )
        )
    return lines


def _range(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def codebook_lines(report: CheckpointReport) -> list[str]:
    """Codebook health: usage per level and SID collisions."""
    h = report.codebook
    if h is None:
        return []
    lines = [
        "",
        f"codebook usage by {h.n_items} items: level, utilization, perplexity (normalized "
        "entropy), max code share, dead codes",
    ]
    for lv in h.levels:
        dead = list_names([str(c) for c in lv.dead_codes], lv.n_dead)
        lines.append(
            f"  {lv.name:<4} {lv.n_used}/{lv.n_codes} = {lv.utilization:.3f}  "
            f"{lv.perplexity:.4g} ({_f(lv.normalized_entropy, 3)})  {lv.max_code_share:.3g}  "
            f"{lv.n_dead}{': ' + dead if lv.n_dead else ''}"
        )
    lines.append(
        f"  SID collisions: {h.n_colliding_items} items share {h.n_colliding_tuples} code tuples"
        + (f" (up to {h.max_items_per_tuple} on one)" if h.n_colliding_tuples else "")
    )
    return lines


def dropped_lines(m: MatrixReport, indent: str = "  ") -> list[str]:
    """What ``--allow-nonfinite`` left out of ``m``: NaN/Inf new rows and original rows
    (``metrics`` and ``check`` both say it: a dropped row is a finding, not a detail)."""
    lines = []
    if m.nonfinite_rows_dropped:
        lines.append(
            f"{indent}dropped: {m.nonfinite_rows_dropped} NaN/Inf new rows (--allow-nonfinite)"
        )
    if m.nonfinite_original_rows_dropped:
        n, ids = m.nonfinite_original_rows_dropped, m.nonfinite_original_ids
        more = ", ..." if n > len(ids) else ""
        lines.append(
            f"{indent}dropped: {n} NaN/Inf original rows (ids {', '.join(map(str, ids))}{more}; "
            "--allow-nonfinite): a prompt holding those tokens gives NaN logits"
        )
    return lines


def sample_lines(m: MatrixReport, indent: str = "  ") -> list[str]:
    """One line when ``m``'s vocabulary figures come from a sample of its rows (a remote
    checkpoint without --full-vocabulary): how many rows, and the spread's error."""
    s = m.vocabulary_sample
    if s is None:
        return []
    return [
        f"{indent}vocabulary: sampled {s.n_read:,} of {s.n_rows:,} original rows "
        f"({len(s.blocks)} blocks, seed {s.seed}), spread {s.spread:.4g} +/- {s.spread_se:.2g} "
        "(standard error); NaN/Inf rows outside the sample unknown (--full-vocabulary: all rows)"
    ]


def _matrix_details(m: MatrixReport, said: set[str] = frozenset()) -> list[str]:
    """The rows one by one, per level, and the neighbours; ``said``: the notes printed
    below, which a level's RSA does not repeat (no codebooks: once per checkpoint)."""
    lines = _untrained_lines(m) + dropped_lines(m) + sample_lines(m)
    if m.levels:
        lines.append(
            "  per level: tokens, eff. rank (centered), mean pairwise cosine, RSA vs codebook (p)"
        )
        for lv in m.levels:
            if lv.rsa is None:
                said_below = lv.rsa_skip_reason in said
                rsa = "not measured" + ("" if said_below else f" ({lv.rsa_skip_reason})")
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
        lines.append(f"  nearest original tokens (first {SHOWN_NEIGHBOUR_TOKENS} new tokens):")
        for tn in m.neighbors[:SHOWN_NEIGHBOUR_TOKENS]:
            near = ", ".join(f"{n.token!r} {n.cosine:.2f}" for n in tn.nearest)
            lines.append(f"    {tn.token}: {near}")
    return lines


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
        if r.quantization is not None:
            lines += _quantization_lines(r.quantization)
    return terminal_lines(lines)


def _quantization_lines(q) -> list[str]:
    """What export did (``geodiag drift CKPT model.gguf``): errors, merges, the verdict."""
    lines = [
        f"  export to {q.dtype}: relative error per token mean {_f(q.relative_error_mean)}, "
        f"max {_f(q.relative_error_max)}",
        f"  tokens made identical: {q.identical_pairs} pair(s)"
        + "".join(f"; {x} = {y}" for x, y in q.identical_examples),
        f"  nearest new-token neighbour changed: {q.neighbour_changed} token(s)"
        + "".join(f"; {c.token}: {c.before} -> {c.after}" for c in q.neighbour_examples),
    ]
    return [*lines, f"  verdict: {q.verdict}"]
