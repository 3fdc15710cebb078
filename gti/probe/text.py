"""``gti probe``'s table, at most 80 columns: the model's shares beside the two
baselines', each with its 95% interval, then the SID -> text likelihoods. Every name
from a file goes through ``geodiag.escape.terminal``."""

from __future__ import annotations

import textwrap

from geodiag.escape import terminal_lines
from gti.probe.measure import Decoding, ProbeResult


def _share(s: dict | object) -> str:
    d = s if isinstance(s, dict) else s.to_dict()  # type: ignore[union-attr]
    return f"{d['estimate']:.3f} [{d['low']:.2f}, {d['high']:.2f}]"


def _rows(model: Decoding, tie: Decoding, frequent: Decoding) -> list[str]:
    rows = [("exact match", model.exact_match, tie.exact_match, frequent.exact_match)]
    for m, t, f in zip(model.levels, tie.levels, frequent.levels, strict=True):
        rows.append((f"level {m.level}", m.accuracy, t.accuracy, f.accuracy))
    return [f"{name:<13}{_share(m):>21}{_share(t):>22}{_share(f):>22}" for name, m, t, f in rows]


def _sid(tokens: list[str | None]) -> str:
    return "".join("?" if t is None else t for t in tokens)


def probe_text(r: ProbeResult) -> str:
    lik = r.likelihood
    d = lik.difference
    seen = "held out from grounding" if r.held_out else "not held out from grounding"
    lines = [
        f"gti probe {r.checkpoint}",
        f"  index {r.index} ({r.n_index_items} items)",
        f"  {r.n_items} items asked about, {seen}:",
        *textwrap.wrap(r.items_from, 80, initial_indent="    ", subsequent_indent="    "),
        "",
        "text -> SID, greedy, constrained to the index's SIDs (95% Wilson intervals)",
        f"{'':<13}{'model':>21}{'tie-break (mean)':>22}{'most frequent':>22}",
        *_rows(r.model, r.tie_break.decoding, r.most_frequent.decoding),
        f"  tie-break answers {_sid(r.tie_break.answer)} to every item,",
        f"  most frequent {_sid(r.most_frequent.answer)}",
        "",
        "SID -> text, mean log-likelihood of the item's text (nats/token)",
        f"  own SID {lik.true_mean:.3f}   shuffled SIDs {lik.shuffled_mean:.3f}",
        f"  difference {d.estimate:+.3f} [{d.low:+.3f}, {d.high:+.3f}] (bootstrap over items), "
        f"sign-flip p {lik.p_value:.3g}",
        f"  own SID likelier for {_share(lik.true_wins)} of items",
        "",
        f"{r.seconds['total']:.1f} s (decoding {r.seconds['decode']:.1f} s, "
        f"likelihood {r.seconds['likelihood']:.1f} s)",
    ]
    return terminal_lines(lines)
