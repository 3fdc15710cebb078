"""``gti probe``'s figures beside a checkpoint (``probe.json``), read for the report.

geodiag only reads the JSON that ``gti probe --write`` leaves in a checkpoint folder; it
never runs the probe (no torch here). A file that is not the probe's is skipped with a
note, never a failed report.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

PROBE_FILENAME = "probe.json"  # written by `gti probe --write` beside the weights
PROBE_FORMAT = "gti.probe"
PROBE_FORMAT_VERSION = 1


def read_probe(checkpoint: Path) -> tuple[dict | None, str | None]:
    """(the probe's JSON of ``checkpoint``, None) when its folder holds one, (None, why)
    when it holds one that cannot be read, (None, None) when it holds none."""
    path = Path(checkpoint) / PROBE_FILENAME
    if not path.is_file():
        return None, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"{path}: not read ({e})"
    if not isinstance(data, dict) or data.get("format") != PROBE_FORMAT:
        return None, f"{path}: not a `gti probe` result (format {PROBE_FORMAT!r})"
    if data.get("format_version") != PROBE_FORMAT_VERSION:
        return None, f"{path}: probe format version {data.get('format_version')!r}, not read"
    return data, None


MEASURES = ("model", "tie_break", "most_frequent")  # the probe's decoders, in column order


def probe_tables(report, num: Callable[..., object], label: Callable[[str], object]) -> list[dict]:
    """Per checkpoint with a probe: its decoding table (exact match, then each level;
    model and the two baselines, each share with its 95% interval) and its likelihood row.
    ``num(*json_pointer_parts, digits=)`` and ``label(text)`` make the html module's
    cells, so every number carries its JSON pointer."""
    out = []
    for ci, e in enumerate(report.checkpoints):
        if e.probe is None:
            continue
        at = ("checkpoints", ci, "probe")
        pr = e.probe

        def share(*ptr: object, at: tuple = at) -> list:
            return [num(*at, *ptr, k, digits=3) for k in ("estimate", "low", "high")]

        rows = [
            [label("exact match")]
            + [c for m in MEASURES for c in share(*decoding(m), "exact_match")]
        ]
        for li, lv in enumerate(pr["model"]["levels"]):
            rows.append(
                [label(f"level {lv['level']}")]
                + [c for m in MEASURES for c in share(*decoding(m), "levels", li, "accuracy")]
            )
        lik = ("likelihood",)
        likelihood = [
            num(*at, *lik, "true_mean", digits=4),
            num(*at, *lik, "shuffled_mean", digits=4),
            *[num(*at, *lik, "difference", k, digits=3) for k in ("estimate", "low", "high")],
            num(*at, *lik, "p_value", digits=3),
            *share(*lik, "true_wins"),
        ]
        out.append(
            {
                "label": e.label,
                "n_items": num(*at, "n_items"),
                "held_out": pr["held_out"],
                "items_from": pr["items_from"],
                "rows": rows,
                "likelihood": likelihood,
            }
        )
    return out


def decoding(measure: str) -> tuple[str, ...]:
    """Where a decoder's figures sit in the probe's JSON: the model's at the top, a
    baseline's under its ``decoding``."""
    return (measure,) if measure == "model" else (measure, "decoding")
