"""README.md's recorded outputs (tools/readme_outputs.py) against what the code prints now.

The README records `geodiag check` and `geodiag report` on ``make demo``'s checkpoints. Here
the same commands, through the script's own :func:`run`, run on a test-sized demo
(tests/gti/sft/demo_run.py: the same arms at the same paths, minutes of CPU less), and
each recorded line must keep the shape of what they print: the same kinds of lines in the
same order, and, numbers, paths, dates and token names masked, the same words. Lines whose
words depend on the data (a check's status, which rows are untrained) are compared with the
outputs of a few more checkpoints, made to reach the demo's branches. When this fails,
rerun the script on a demo run (its docstring says how).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from tools import readme_outputs as ro

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
TEXT = ro.README.read_text(encoding="utf-8")
# The one recorded line no test-sized run reaches: the demo's grounded arm keeps a faint
# structure at two levels (significant RSA under 0.1 needs hundreds of codes).
UNSEEN = {"check-grounded": 1}
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _embeddings(folder: Path) -> tuple[dict, str]:
    from safetensors.torch import load_file

    weights = load_file(folder / "model.safetensors")
    (name,) = [k for k in weights if "embed" in k]
    return weights, name


def _variant(demo: Path, arm: str, init: str, name: str, rows) -> None:
    """A copy of ``sft/arm`` whose new rows are ``rows(init_rows, sft_rows, ids, dead)``."""
    from safetensors.torch import save_file

    from geodiag.io.vocabulary.sidecar import load

    src, out = demo / "seed-0/sft" / arm, demo / "seed-0/sft" / name
    shutil.copytree(src, out)
    side = load(out / "semantic_ids.json")
    ids = [t for lv in side.levels for t in lv.token_ids]
    used = {(k, c) for codes in side.items.values() for k, c in enumerate(codes)}
    dead = [
        t
        for k, lv in enumerate(side.levels)
        for c, t in enumerate(lv.token_ids)
        if (k, c) not in used
    ]
    before, emb = _embeddings(demo / "seed-0/init" / init)
    weights, _ = _embeddings(out)
    weights[emb] = rows(before[emb], weights[emb], ids, dead)
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})


def _moved_together(init, sft, ids, dead):
    """The demo's sft/mean: SFT shifted the new rows, all alike, by a hair."""
    out = sft.clone()
    out[ids] = init[ids] + 1e-4 * torch.ones(init.shape[1])
    return out


def _dead_at_init(init, sft, ids, dead):
    """The demo's sft/gti-from-description: the dead codes' rows are their init's, exactly."""
    out = sft.clone()
    out[dead] = init[dead]
    return out


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    for folder in ("gti", "gti/sft"):
        if str(ROOT / "tests" / folder) not in sys.path:
            sys.path.insert(0, str(ROOT / "tests" / folder))
    from demo_run import build_demo_isolated

    root = tmp_path_factory.mktemp("readme-demo")
    build_demo_isolated(root / "world", root / ".gti-cache", out=root / "demo")
    demo = root / "demo"
    _variant(demo, "mean", "mean", "mean-moved-together", _moved_together)
    _variant(
        demo, "gti-from-description", "gti-from-description-mean", "gti-dead-at-init", _dead_at_init
    )
    # The demo's checkpoints carry SmolLM2's chat template, which names no SID token: the
    # check then says the spared rows are absent from it too.
    (demo / "seed-0/sft/gti-dead-at-init/chat_template.jinja").write_text(CHAT_TEMPLATE)
    return demo


@pytest.fixture(scope="module")
def outputs(demo) -> dict[str, ro.Output]:
    return {rec.name: ro.run(demo, rec.args) for rec in ro.RECORDED}


@pytest.fixture(scope="module")
def corpus(demo, tmp_path_factory) -> list[str]:
    """`geodiag check` on every arm of the test-sized demo, the two variants, and a planted
    structured checkpoint (every level's RSA passes)."""
    sys.path.insert(0, str(ROOT / "tests" / "geodiag"))
    from geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint

    base = base_rows()
    planted = tmp_path_factory.mktemp("planted") / "grounded"
    write_checkpoint(planted, planted_new_rows("grounded", base), base=base)
    lines = ro.run(demo, ("check", str(planted))).lines
    for arm in sorted(demo.glob("seed-0/*/*")):
        lines += ro.run(demo, ("check", f"{ro.DEMO}/{arm.relative_to(demo)}")).lines
    return lines


def test_every_recorded_command_has_its_region():
    regions = ro.regions(TEXT)
    assert set(regions) == {rec.name for rec in ro.RECORDED}
    for rec in ro.RECORDED:
        assert f"`{rec.command}`" in regions[rec.name]  # the command it shows is the one run
        assert ro.recorded_lines(regions[rec.name])


def _flagged(name: str, recorded: list[str], outputs, corpus) -> list[str]:
    """Why the test below fails on ``recorded`` as the region ``name``: a stale line, or a
    line no output reaches beyond those known to be out of a tiny run's reach."""
    current = outputs[name].lines
    unseen = ro.unseen(recorded, current, corpus)
    extra = [f"no output shows: {x.strip()!r}" for x in unseen[UNSEEN.get(name, 0) :]]
    return ro.stale(recorded, current, corpus) + extra


@pytest.mark.parametrize("rec", ro.RECORDED, ids=lambda r: r.name)
def test_the_readme_shows_what_the_code_prints(rec, outputs, corpus):
    recorded = ro.recorded_lines(ro.regions(TEXT)[rec.name])
    problems = _flagged(rec.name, recorded, outputs, corpus)
    assert not problems, f"README.md is stale: run `{ro.COMMAND}` after make demo\n" + "\n".join(
        problems
    )


def test_a_stale_readme_is_caught(outputs, corpus):
    """A word changed (in a check, a verdict's first clause or its remedy), a check added
    or removed, two lines swapped: each is flagged."""
    recorded = ro.recorded_lines(ro.regions(TEXT)["check-mean"])
    assert not _flagged("check-mean", recorded, outputs, corpus)
    for old, new in (
        ("tiny ball", "small ball"),
        ("one point", "a point"),
        ("ground them", "train them"),
    ):
        changed = [line.replace(old, new) for line in recorded]
        assert changed != recorded and _flagged("check-mean", changed, outputs, corpus), old
    at = next(i for i, line in enumerate(recorded) if "norm_ratio" in line)
    added = [*recorded[:at], "    [pass] row_norm_spread 0.1 <= 1", *recorded[at:]]
    assert _flagged("check-mean", added, outputs, corpus)
    assert _flagged("check-mean", recorded[:at] + recorded[at + 1 :], outputs, corpus)
    swapped = [*recorded[: at - 1], recorded[at], recorded[at - 1], *recorded[at + 1 :]]
    assert _flagged("check-mean", swapped, outputs, corpus)
    report = ro.recorded_lines(ro.regions(TEXT)["report"])
    changed = [line.replace("rendering figures", "drawing figures") for line in report]
    assert changed != report and _flagged("report", changed, outputs, corpus)


def test_the_script_writes_regions_it_then_accepts(outputs, corpus, tmp_path):
    """What the script records of a run passes the comparison, and rewriting the README
    changes its regions only."""
    new = {
        rec.name: ro.region(rec, outputs[rec.name], "2026-01-02", "Some CPU", 2)
        for rec in ro.RECORDED
    }
    for rec in ro.RECORDED:
        lines = ro.recorded_lines(new[rec.name])
        assert not ro.stale(lines, outputs[rec.name].lines, corpus), rec.name
        assert all(len(x) <= ro.WIDTH + 3 or "verdict:" in x for x in lines)
    assert "2026-01-02 on Some CPU, 2 cores" in new["check-mean"]
    assert " MiB peak RSS" in new["report"]
    rewritten = ro.rewrite(TEXT, new)
    assert ro.regions(rewritten) == new
    outside = [TEXT.split(ro.START.format(name=r.name))[0] for r in ro.RECORDED[:1]]
    assert rewritten.startswith(outside[0])
    assert ro.rewrite(rewritten, new) == rewritten


def test_the_refresh_command_rewrites_the_regions_from_a_run(demo, corpus, tmp_path, capsys):
    """`python -m tools.readme_outputs --write` on a demo folder: every region rewritten
    from that run, and what it wrote passes the comparison; the rest of the page kept."""
    page = tmp_path / "README.md"
    page.write_text(TEXT, encoding="utf-8")
    assert ro.main(["--demo", str(demo), "--write", "--readme", str(page)]) == 0
    assert f"rewrote {page}" in capsys.readouterr().out
    text = page.read_text(encoding="utf-8")
    for rec in ro.RECORDED:
        region = ro.regions(text)[rec.name]
        assert region != ro.regions(TEXT)[rec.name]
        lines = ro.recorded_lines(region)
        assert not ro.stale(lines, ro.run(demo, rec.args).lines, corpus), rec.name
        assert "13 new rows" in region or rec.name == "report"  # the test-sized demo's
    assert (
        text.split(ro.START.format(name="check-mean"))[0]
        == TEXT.split(ro.START.format(name="check-mean"))[0]
    )


def test_the_cut_keeps_verdicts_whole():
    line = "    [fail] n_untrained 5 > 0: " + ", ".join(f"<a_{i}> (1 item ID)" for i in range(40))
    cut = ro.cut(line)
    assert len(cut) <= ro.WIDTH + 3 and cut.endswith(", ...") and line.startswith(cut[:-3])
    verdict = "  verdict: " + "x, " * 200
    assert ro.cut(verdict) == verdict


def test_shapes_mask_what_varies_and_keep_the_words():
    a = "    [fail] n_untrained 691 > 0: 707 of 768 rows (runs/demo/x); <c_68> (38 item IDs)"
    b = "    [fail] n_untrained 5 > 0: 13 of 13 rows (/tmp/y/z); <a_3> (1 item ID)"
    assert ro.shape(a) == ro.shape(b)
    assert ro.shape(a) != ro.shape(a.replace("rows", "tokens"))
    assert np.all([ro.key(x) == "[fail] n_untrained" for x in (a, b)])
