"""A drop-in output passes its own gate when grounding reaches every token the index feeds,
and says which it did not reach, and the ``--steps`` that would, when it falls short.

The world: 40 LC-Rec-format items over 4 levels x 16 codes, so that some codes are carried
by one or two items only (a held-out or undrawn item then strands them at their init, and
``geodiag check`` fails them: the index feeds them).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import typer
from lcrec_world import write_lcrec
from typer.testing import CliRunner

from gti.dropin.files import CHECKS_FILENAME, CHECKS_TEXT_FILENAME
from gti.dropin.run import split_holdout
from gti.init.cli import init
from gti.prompts import SID_TO_TEXT, TEXT_TO_SID
from tools import readme_outputs

app = typer.Typer()
app.command("init")(init)
app.command("noop")(lambda: None)

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "docs" / "recipes" / "lc-rec.md"
N_ITEMS, BATCH = 40, 8
ONE_PASS = (N_ITEMS - N_ITEMS // 10) * 2 // BATCH  # 36 grounded items, 2 directions: 9 steps


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    from gti.models.tiny import save_tiny

    world = write_lcrec(tmp_path_factory.mktemp("small-lcrec"), n_items=N_ITEMS)
    corpus = world.texts() + list(TEXT_TO_SID) + list(SID_TO_TEXT)
    return world, save_tiny(tmp_path_factory.mktemp("tiny"), corpus, seed=0)


def _ground(small, out, steps: int):
    world, model = small
    argv = ["init", "--sids", world.index, "--items", world.items, "--model", model, "-o", out]
    argv += ["--codebooks", world.codebooks, "--strategy", "gti", "--no-progress"]
    res = CliRunner().invoke(app, [*map(str, argv), "--steps", str(steps), "--batch-size", BATCH])
    assert res.exit_code == 0, res.output
    return res.output, json.loads((out / CHECKS_FILENAME).read_text())


def _passed(checks) -> bool:
    return all(c["status"] != "fail" for c in checks["geodiag_check"]["checks"])


def test_the_holdout_strands_no_token():
    """Items 0-9 each carry a token of their own; the rest share theirs. No held-out item
    is one of the ten, whatever the seed; where nothing binds, the sample is the plain one."""
    items = [str(k) for k in range(100)]
    tokens = {i: (f"<a_{int(i) % 4}>", f"<b_{i}>" if int(i) < 10 else "<b_x>") for i in items}
    for seed in range(20):
        held, grounded = split_holdout(items, 10, seed, tokens)
        assert len(held) == 10 and not {str(k) for k in range(10)} & set(held)
        assert sorted(held + grounded, key=int) == items
        carried = Counter(t for i in grounded for t in tokens[i])
        assert all(carried[t] for i in items for t in tokens[i])
    shared = {i: (f"<a_{int(i) % 4}>",) for i in items}
    assert split_holdout(items, 10, 3, shared) == split_holdout(items, 10, 3)


def test_one_pass_over_the_items_passes_the_gate(small, tmp_path):
    printed, checks = _ground(small, tmp_path / "out", steps=ONE_PASS)
    assert checks["unreached"]["tokens"] == []
    assert _passed(checks), printed
    assert ": PASS" in printed and "  verdict: " in printed  # as `geodiag check` prints it
    assert "never reached" not in printed


def test_a_short_run_names_the_tokens_it_missed_and_the_steps_that_reach_them(small, tmp_path):
    printed, checks = _ground(small, tmp_path / "short", steps=4)
    missed = checks["unreached"]["tokens"]
    assert missed and not _passed(checks)
    (untrained,) = [c for c in checks["geodiag_check"]["checks"] if c["name"] == "n_untrained"]
    assert untrained["status"] == "fail"
    named = set(re.findall(r"<[a-d]_\d+>", untrained["message"]))
    assert named <= set(missed)  # what the gate fails is what grounding never reached
    text = (tmp_path / "short" / CHECKS_TEXT_FILENAME).read_text()
    assert "  verdict: " in text and f"never reached {len(missed)} of" in text
    steps = int(re.search(r"--steps (\d+) draws every item once", text)[1])
    assert steps == checks["unreached"]["one_pass_steps"] == ONE_PASS
    printed, checks = _ground(small, tmp_path / "longer", steps=steps)  # the step it names
    assert _passed(checks), printed


def _recorded(page: Path) -> list[str]:
    lines = page.read_text(encoding="utf-8").splitlines()
    at = lines.index("<!-- recorded: tests/gti/dropin/test_dropin_every_code.py -->")
    assert lines[at + 1] == "```text"
    return lines[at + 2 : lines.index("```", at + 2)]


def test_the_recipe_shows_what_its_short_run_prints(small, tmp_path):
    """docs/recipes/lc-rec.md records this run (--steps 4): its lines keep the shape of what
    gti init prints now (numbers, paths and token names masked), the verdict line and
    the line naming the --steps included."""
    printed, _ = _ground(small, tmp_path / "short", steps=4)
    current = [line for line in printed.splitlines() if line]
    recorded = _recorded(RECIPE)
    assert any(line.startswith("  verdict: ") for line in recorded)
    assert any("draws every item once" in line for line in recorded)
    assert not readme_outputs.stale(recorded, current), readme_outputs.stale(recorded, current)
    assert not readme_outputs.unseen(recorded, current)
    changed = [line.replace("never reached", "did not reach") for line in recorded]
    assert readme_outputs.stale(changed, current)  # a reworded line is caught


def test_the_probe_asks_about_the_items_the_run_held_out(small, tmp_path):
    """`gti probe` redraws a drop-in output's held-out set from init_config.json: the same
    draw as the run, the index's tokens included (on this world they change the sample)."""
    from gti.probe.config import ProbeConfig
    from gti.probe.source import resolve_source

    out = tmp_path / "out"
    _ground(small, out, steps=1)
    src = resolve_source(ProbeConfig(checkpoint=out))
    assert src.held_out
    run = json.loads((out / "init_config.json").read_text())
    drawn, _ = split_holdout(list(src.texts), run["holdout"], run["seed"], src.index.items)
    plain, _ = split_holdout(list(src.texts), run["holdout"], run["seed"])
    assert src.items == drawn and drawn != plain
