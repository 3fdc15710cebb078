"""Every figure of a report as matplotlib draws it: no text drawn as raw mathtext (a log
axis's ``$\\mathdefault{10^{0}}$``), and names read from files, mathtext-like or not, drawn
literally, as typed."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from geodiag_fixtures import LEVELS, base_rows, planted_new_rows, tokenizer_json, write_checkpoint
from report_fixtures import write_set

from geodiag.io.vocabulary import sidecar
from geodiag.outputs.report import ReportOptions, build_report

pytest.importorskip("matplotlib")
from matplotlib.text import Text  # noqa: E402

from geodiag.outputs.report import figures  # noqa: E402

# Names a checkpoint's maker controls, each valid mathtext or a mathtext error if parsed.
MATH_LEVELS = ("$\\frac{a}{b}$", "$$", "x\\$y$z$")
MATH_STRATEGY = "$\\notacommand$"
MATH_RUN = "$\\frac{1}{2}$ run"
# What matplotlib leaves of a log formatter's label when it is drawn as text, not math.
RAW_MATH = re.compile(r"\\mathdefault|\^\{|\$[^$]*\\[a-z]+")


def write_math_checkpoint(root, kind, provenance):
    """A checkpoint whose sidecar levels and init strategy are :data:`MATH_LEVELS` and
    :data:`MATH_STRATEGY` (so the labels and the cosine maps' ticks carry them)."""
    base = base_rows()
    rows = planted_new_rows("grounded", base)
    if kind == "sft":
        rows = rows + np.random.default_rng(7).normal(size=rows.shape) * 0.02
    write_checkpoint(root, rows, base=base, with_sidecar=False, with_codebooks=False)
    levels, next_id = [], len(base)
    for name, (_, k) in zip(MATH_LEVELS, LEVELS, strict=True):
        levels.append(sidecar.Level(name, k, list(range(next_id, next_id + k))))
        next_id += k
    items = {f"item{i}": [i % k for _, k in LEVELS] for i in range(8)}
    sids = sidecar.SemanticIds(len(base), levels, items, provenance)
    sidecar.save(sids, root)
    (root / "tokenizer.json").write_text(
        json.dumps(tokenizer_json(len(base), sids.token_strings()))
    )
    return root


def without_names(text: str) -> str:
    """``text`` less the names above, which are drawn as typed, mathtext-like as they are."""
    for name in (*MATH_LEVELS, MATH_STRATEGY, MATH_RUN):
        text = text.replace(name, "")
    return text


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """(every Text artist of every figure the report builds, as drawn; the report) for the
    standard set plus a pair and a checkpoint-N run with mathtext-like names."""
    tmp = tmp_path_factory.mktemp("figures")
    paths = write_set(tmp / "ckpts")
    run = tmp / MATH_RUN
    prov = {"init_strategy": MATH_STRATEGY, "stage": "init", "seed": 0}
    paths.append(write_math_checkpoint(run / "checkpoint-1", "init", prov))
    prov = {"init_strategy": MATH_STRATEGY, "stage": "sft", "seed": 0}
    prov[sidecar.INIT_CHECKPOINT] = "../checkpoint-1"
    paths.append(write_math_checkpoint(run / "checkpoint-2", "sft", prov))
    report = build_report(paths, opts=ReportOptions(n_permutations=10))
    figs = []
    real_uri = figures._uri

    def keep(fig, fmt, style):
        figs.append(fig)
        return real_uri(fig, fmt, style)

    mp = pytest.MonkeyPatch()
    mp.setattr(figures, "_uri", keep)
    try:
        uris = figures.render_all(report)
    finally:
        mp.undo()
    texts = []
    for fig in figs:
        fig.canvas.draw()  # tick labels exist once drawn
        for t in fig.findobj(Text):
            if t.get_visible() and t.get_text():
                texts.append(t._preprocess_math(t.get_text()))  # (string drawn, is math)
    return texts, report, uris


def test_every_figure_is_drawn(drawn):
    _, report, uris = drawn
    assert {"spectra", "cosine_maps", "cosine_maps_centered", "row_norms", "drift"} <= set(uris)
    assert "trajectories" in uris and report.drift


def test_no_text_is_drawn_as_raw_mathtext(drawn):
    texts, _, _ = drawn
    raw = [s for s, is_math in texts if not is_math and RAW_MATH.search(without_names(s))]
    assert raw == []
    # the log axes' tick labels are there, and drawn as math (10 with a superscript)
    powers = [s for s, is_math in texts if is_math and "10^{" in s]
    assert len(powers) >= 4, texts


def test_names_from_files_are_drawn_literally(drawn):
    texts, _, _ = drawn
    literal = [s for s, is_math in texts if not is_math]
    math = [s for s, is_math in texts if is_math]
    for name in MATH_LEVELS:  # the cosine maps' tick labels
        assert name in literal
    label = f"{MATH_STRATEGY}/sft"
    assert any(label in s for s in literal)  # titles, legends
    assert any(f"{MATH_STRATEGY}/init -> {label}" == s for s in literal)  # the drift pair
    assert any(MATH_RUN in s for s in literal)  # the run's trajectory, from its folder name
    assert not any("frac" in s or "notacommand" in s or "$$" in s for s in math)


def test_svg_figures_hold_no_raw_mathtext(drawn):
    """The SVG as written (text kept as text, the source of each math label in a comment,
    which is not drawn): a raw label would be a <text> as typed."""
    import base64
    import xml.etree.ElementTree as ET

    _, _, uris = drawn
    svgs = [u for u in uris.values() if u.startswith("data:image/svg+xml")]
    assert len(svgs) >= 4
    drawn_text = []
    for uri in svgs:
        root = ET.fromstring(base64.b64decode(uri.split(",", 1)[1]))  # comments dropped
        drawn_text += ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert [t for t in drawn_text if RAW_MATH.search(without_names(t))] == []
    assert any(MATH_LEVELS[0] in t or MATH_STRATEGY in t for t in drawn_text)


def test_a_curve_identical_to_another_says_so(tmp_path):
    """Two checkpoints whose new rows are the same draw one curve: the second's legend says
    "same as" the first (gti/init hid under gti/sft, issue 50); a different one does not."""
    import base64
    import xml.etree.ElementTree as ET

    base = base_rows()
    rows = planted_new_rows("grounded", base)
    paths = [
        write_checkpoint(tmp_path / name, r, base=base)
        for name, r in (
            ("one", rows),
            ("two", rows.copy()),
            ("other", planted_new_rows("random", base)),
        )
    ]
    report = build_report(paths, opts=ReportOptions(n_permutations=10))
    labels = [e.label for e in report.checkpoints]
    uri = figures.spectra(report, figures.FigureFormat())
    root = ET.fromstring(base64.b64decode(uri.split(",", 1)[1]))
    text = ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]
    same = [t for t in text if "same as" in t]
    assert len(same) == 1, text
    first, second, other = labels
    assert same[0] == f"{second} (same as {first})"
    assert not any(other in t and "same as" in t for t in text)
