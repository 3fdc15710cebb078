"""The report's structure: sections in order, every number equal to the JSON, no external reference."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import Page, strict_json, write_set

from geodiag.metrics.cosine import cosine_matrix
from geodiag.outputs.report import ReportOptions, write_report
from geodiag.outputs.report.build import _block_index, checkpoint_labels
from geodiag.outputs.report.html import resolve

SECTIONS = ["verdict", "metrics", "spectra", "cosine", "rsa", "drift", "norms", "provenance"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    paths = write_set(root / "ckpts")
    opts = ReportOptions(
        title="Tiny report", n_permutations=50, command_line="geodiag report (test)"
    )
    files = write_report(paths, root / "out" / "tiny.html", opts=opts)
    html = files.html.read_text(encoding="utf-8")
    return html, strict_json(files.json.read_text(encoding="utf-8")), Page(html), paths


def test_writes_exactly_the_two_files(built, tmp_path_factory):
    _, _, _, paths = built
    out = paths[0].parents[1] / "out"
    assert sorted(p.name for p in out.iterdir()) == ["tiny.html", "tiny.json"]


def test_sections_present_in_reading_order(built):
    html, _, page, _ = built
    assert [i for i in page.ids if i in SECTIONS] == SECTIONS
    for heading in [
        "Verdict",
        "Metrics side by side",
        "Singular spectra",
        "Cosine-similarity maps",
        "RSA against the codebooks",
        "Drift between checkpoints",
        "Row norms and nearest original tokens",
        "Provenance",
    ]:
        assert f"</span>{heading}</h2>" in html
    figures = [a for tag, a in page.tags if tag == "img"]
    # spectra, cosine maps (centered and raw), drift, row norms, movement against items
    assert len(figures) == 6
    assert "1 Verdict" in html and "xxh3_128:" in html  # each digest names its algorithm


def _close(text: str, value: float) -> bool:
    """Does the printed ``text`` round ``value`` correctly (to the digits printed)?"""
    shown = Decimal(text)
    half_ulp = Decimal(5) * Decimal(10) ** (shown.as_tuple().exponent - 1)
    return abs(Decimal(repr(float(value))) - shown) <= half_ulp * Decimal("1.000001")


def test_every_marked_number_equals_the_json(built):
    _, data, page, _ = built
    assert len(page.marked) > 150
    numbers = 0
    for ptr, text in page.marked:
        value = resolve(data, ptr)
        if value is None:
            assert text == "undefined", ptr
        elif isinstance(value, str):
            assert text == value.replace("`", ""), ptr  # code spans drop their backticks
        elif isinstance(value, bool):
            assert text == str(value).lower(), ptr
        else:
            assert _close(text, value), (ptr, text, value)
            numbers += 1
    assert numbers > 100


def test_every_number_in_a_table_cell_is_marked(built):
    html, _, _, _ = built
    for cell in re.findall(r"<td class=\"num[^\"]*\"[^>]*>[^<]*</td>", html):
        text = re.sub(r"<[^>]+>", "", cell)
        if re.fullmatch(r"-?[\d.]+(e[+-]\d+)?", text):
            assert "data-json=" in cell, cell


def test_verdicts_name_cause_and_remedy(built):
    _, data, _, _ = built
    by_label = {c["label"]: c for c in data["checkpoints"]}
    assert list(by_label) == ["mean/init", "gti/init", "gti/sft", "random/init"]
    mean = by_label["mean/init"]["verdict"]
    assert mean["status"] == "fail"
    assert "all 24 new tokens are the same vector" in mean["sentence"].lower()
    assert "gti init --strategy gti" in mean["sentence"]
    for c in mean["checks"]:  # check lines state the finding; the diagnosis the remedy
        assert "gti init --strategy gti" not in c["sentence"], c
    random_ = by_label["random/init"]["verdict"]
    assert random_["status"] == "warn"
    assert "carries no structure" in random_["sentence"] and "RSA ~" in random_["sentence"]
    assert by_label["gti/init"]["verdict"]["status"] == "pass"
    assert "healthy" in by_label["gti/init"]["verdict"]["sentence"].lower()


def test_each_card_gives_its_remedy_once(built):
    html, _, _, _ = built
    cards = html.split('<div class="card ')[1:]
    assert len(cards) == 4
    mean = next(c for c in cards if "mean/init" in c.split("</h3>")[0])
    assert mean.split("</ul>")[0].count("gti init --strategy gti") == 1
    for card in cards:
        assert card.split("</ul>")[0].count("gti init --strategy gti") <= 1


def test_drift_pairs_init_and_sft_of_the_same_strategy(built):
    _, data, _, _ = built
    assert [(d["before"], d["after"]) for d in data["drift"]] == [("gti/init", "gti/sft")]
    d = data["drift"][0]["reports"][0]["drift"]
    assert d["cosine_mean"] > 0.9 and d["structure_rsa"]["spearman"] > 0.5
    assert sum(data["drift"][0]["cosine_histograms"][0]["counts"]) == 24


def test_cosine_maps_are_described_not_dumped(built):
    _, data, _, _ = built
    cm = data["cosine_maps"][0]
    assert cm["n_tokens"] == 24 and not cm["aggregated"] and cm["level_starts"] == [0, 8, 16]
    assert "_values" not in cm


def test_centered_cosine_map_is_shown_and_says_so(built):
    html, _, page, _ = built
    cosine = html[html.index('<section id="cosine">') : html.index('<section id="rsa">')]
    assert "Centered: cosine of the rows minus their mean" in cosine
    assert "Raw: cosine of the rows as they are" in cosine
    alts = [a.get("alt", "") for tag, a in page.tags if tag == "img"]
    assert any(a.startswith("Centered cosine heatmaps") for a in alts)
    assert cosine.index("Centered:") < cosine.index("Raw:")


def test_centered_map_removes_the_common_component():
    from types import SimpleNamespace

    from geodiag.outputs.report.build import ReportOptions, cosine_map

    rng = np.random.default_rng(0)
    own = rng.normal(size=(12, 8))
    rows = own + 50.0  # a shared offset: every raw cosine is ~1
    ckpt = SimpleNamespace(new=SimpleNamespace(level_index=None, level_names=[]))
    cm = cosine_map("x", ckpt, rows, np.arange(12), ReportOptions())
    assert np.nanmin(cm._values) > 0.99
    np.testing.assert_allclose(cm._centered, cosine_matrix(own - own.mean(axis=0)), atol=1e-12)
    agg = cosine_map("x", ckpt, rows, np.arange(12), ReportOptions(heatmap_max_tokens=4))
    assert agg.aggregated and agg._centered.shape == agg._values.shape
    assert np.nanmax(np.abs(agg._centered)) < 0.9


def test_self_contained(built):
    html, _, page, _ = built
    lowered = html.lower()
    assert "<script" not in lowered and "<link" not in lowered and "<iframe" not in lowered
    assert "@import" not in lowered and "url(" not in lowered and "@font-face" not in lowered
    for tag, attrs in page.tags:
        for name in ("src", "href", "srcset", "action", "poster", "data"):
            value = attrs.get(name)
            if value is None:
                continue
            assert not re.match(r"\s*(https?:|//|ftp:|ws)", value, re.I), (tag, name, value[:80])
            if name == "src":
                assert value.startswith(("data:image/png;base64,", "data:image/svg+xml;base64,")), (
                    tag
                )
            if name == "href":
                assert value.startswith("#"), value
    csp = [
        a["content"]
        for tag, a in page.tags
        if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    ]
    assert csp and "default-src 'none'" in csp[0]


def test_labels_are_unique():
    paths = [Path("/x/run1"), Path("/y/run1"), Path("/z/other"), Path("/w/other")]
    provs = [
        {"init_strategy": "gti", "stage": "sft"},
        {"init_strategy": "gti", "stage": "sft"},
        {},
        {},
    ]
    labels = checkpoint_labels(paths, provs)
    assert len(set(labels)) == 4
    assert labels[2] == "other" and labels[0].startswith("gti/sft")


def test_block_means_match_a_direct_average(tmp_path):
    """Above heatmap_max_tokens a cell is the mean cosine of two blocks (self-pairs excluded)."""
    paths = write_set(tmp_path)
    opts = ReportOptions(n_permutations=0, heatmap_max_tokens=12, heatmap_blocks=6)
    files = write_report(paths[1:2], tmp_path / "agg.html", opts=opts)
    cm = files.report.cosine_maps[0]
    assert cm.aggregated and cm.block_size == 4 and cm.n_cells == 6 and cm.level_starts == [0, 2, 4]
    from geodiag.io.checkpoint import open_checkpoint

    ck = open_checkpoint(paths[1])
    cos = cosine_matrix(ck.read_rows(ck.matrices[0], ck.new.ids))
    blocks, _ = _block_index(ck.new.level_index, 3, 4)
    for a in range(6):
        for b in range(6):
            sub = cos[np.ix_(blocks == a, blocks == b)]
            expect = (sub.sum() - np.trace(sub)) / (sub.size - len(sub)) if a == b else sub.mean()
            assert cm._values[a, b] == pytest.approx(expect, abs=1e-9)
    assert "aggregated, " in files.html.read_text()


def test_neighbour_cells_keep_each_token_apart_from_its_score(built):
    """A neighbour cell read as text was '9 0.69 7 0.68' (digit tokens): each item is now the
    token, then its cosine in parentheses, items separated by commas."""
    html, data, _, _ = built
    table = html[
        html.index('<table class="nbrs">') : html.index(
            "</table>", html.index('<table class="nbrs">')
        )
    ]
    cells = re.findall(r"<td>(.*?)</td>", table, re.S)
    texts = [
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", c)).replace("&nbsp;", " ").strip() for c in cells
    ]
    texts = [t for t in texts if t and t != "-"]
    item = r"\S.*? \(-?\d+(?:\.\d+)?\)"
    checked = [t for t in texts if "(" in t]
    assert checked, texts
    for t in checked:
        assert re.fullmatch(rf"{item}(?:, {item})*", t), t
    first = data["checkpoints"][0]["report"]["matrices"][0]["neighbors"][0]["nearest"]
    assert len(first) >= 1


def test_cards_show_what_is_wrong_and_fold_what_passes(built):
    """Issue 50 (390 px): every card listed all its checks, 9 rows each; the failing and
    warning checks stay in view, the passing ones fold under a summary that names them.
    Each check is on the card exactly once, folded or not."""
    html, data, _, _ = built
    cards = html.split('<div class="card ')[1:]
    for card, entry in zip(cards, data["checkpoints"], strict=True):
        card = card.split('<div class="card ')[0]
        shown, _, folded = card.partition('<details class="passed">')
        checks = entry["verdict"]["checks"]
        passed = [c["name"] for c in checks if c["status"] == "pass"]
        assert (folded != "") == bool(passed), entry["label"]
        for c in checks:
            name = f'<span class="what">{c["name"]}'
            assert card.count(name) == 1, (entry["label"], c["name"])
            assert (name in folded) == (c["status"] == "pass"), (entry["label"], c["name"])
        if passed:
            summary = folded.split("</summary>")[0]
            assert f"{len(passed)} check{'s' if len(passed) != 1 else ''} pass: " in summary
            assert all(n in summary for n in passed)


def test_provenance_tables_fold(built):
    """The per-checkpoint provenance and the digests are long tables on a phone: folded."""
    html, _, _, _ = built
    prov = html.split('<section id="provenance">')[1].split("</section>")[0]
    assert prov.count('<details class="fold">') == 2
    for part in prov.split('<details class="fold">')[1:]:
        body = part.split("</details>")[0]
        assert "<summary>" in body and "<table>" in body
    assert "<dt>command</dt>" in prov.split('<details class="fold">')[0]  # the header stays
