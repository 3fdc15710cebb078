"""geodiag.gate.checks: each check's verdict on a matrix (check_matrix, run_gate), the
threshold bounds (a floor passes at its value, a ceiling too; undefined fails a floor and
skips a ceiling), the callback's collapse test, and reading thresholds from TOML
(load_config, resolve_config). The table itself and what derives from it (flags, the
action, the docs) is tests/geodiag/gate/test_gate_table.py's.

Reports are measured once per planted geometry; a check's value is then planted into a
copy (dataclasses.replace), so each verdict is compared with a hand-set number.
"""

from __future__ import annotations

import dataclasses

import pytest
from geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint

import geodiag
from geodiag.errors import InputError
from geodiag.gate.checks import (
    CHECKS,
    DISABLED,
    SINGLE_ROW,
    GateConfig,
    check_matrix,
    collapse_checks,
    load_config,
    resolve_config,
    run_gate,
    with_overrides,
)
from geodiag.gate.trajectory import METRICS, structure_of_report

KINDS = ("mean", "mean-noise", "line", "random", "grounded")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """{kind: CheckpointReport} of the planted geometries (RSA with 50 permutations)."""
    root = tmp_path_factory.mktemp("gate")
    base = base_rows()
    out = {}
    for kind in KINDS:
        path = write_checkpoint(root / kind, planted_new_rows(kind, base), base=base)
        out[kind] = geodiag.measure(path, n_permutations=50, neighbors=0)
    return out


def by_name(results) -> dict:
    return {c.name: c for c in results}


def with_centered(m, **changes):
    """``m`` with fields of its centered spectrum replaced."""
    new = dataclasses.replace(m.new, centered=dataclasses.replace(m.new.centered, **changes))
    return dataclasses.replace(m, new=new)


def test_which_check_catches_which_collapse(reports):
    """docs/gate.md's table: each collapsed form fails for the stated reason, healthy rows
    pass every default."""

    def failed(kind):
        return {c.name for c in run_gate(reports[kind], GateConfig()).checks if c.status == "fail"}

    assert failed("mean") >= {"effective_rank_ratio", "spread_relative", "mean_pairwise_cosine"}
    noise = failed("mean-noise")
    assert {
        "spread_relative",
        "mean_pairwise_cosine",
    } <= noise and "effective_rank_ratio" not in noise
    assert failed("line") == {"effective_rank_ratio"}
    assert failed("random") == failed("grounded") == set()


def test_run_gate_is_check_matrix_over_the_matrices(reports):
    rep = reports["random"]
    # ||sum of unit rows||^2 >= 0 bounds the mean pairwise cosine below by -1/(n - 1):
    # -1/23 for 24 rows, so a ceiling of -0.05 fails any rows.
    cfg = GateConfig(max_mean_cosine=-0.05)
    res = run_gate(rep, cfg)
    assert res.path == rep.path and res.tensors == {"input": "model.embed_tokens.weight"}
    per_matrix = [c for m in rep.matrices for c in check_matrix(m, cfg)]
    assert res.checks[: len(per_matrix)] == per_matrix
    # In table order: block, row, one result per level, then one per checkpoint.
    names = [c.name for c in res.checks]
    assert names == [c.name for c in CHECKS if c.scope in ("block", "row")] + [
        "rsa[a]",
        "rsa[b]",
        "rsa[c]",
        "vocabulary_disagreements",
    ]
    # One failed check fails the gate.
    assert not res.passed and [c.name for c in res.checks if c.status == "fail"] == [
        "mean_pairwise_cosine"
    ]


@pytest.mark.parametrize(
    ("value", "status", "message"),
    [
        (0.1, "pass", "effective_rank_ratio 0.1 >= 0.1"),
        (0.25, "pass", "effective_rank_ratio 0.25 >= 0.1"),
        (0.0999, "fail", "effective_rank_ratio 0.0999 < 0.1: the 24 new rows span few"),
        (None, "fail", "effective_rank_ratio is undefined: the 24 new rows span few"),
    ],
)
def test_a_floor_passes_at_its_value_and_fails_below_or_undefined(reports, value, status, message):
    m = with_centered(reports["random"].matrices[0], effective_rank_ratio=value)
    res = by_name(check_matrix(m, GateConfig()))["effective_rank_ratio"]
    assert (res.status, res.value, res.threshold) == (status, value, 0.1)
    assert res.message.startswith(message)


@pytest.mark.parametrize(
    ("value", "status", "message"),
    [
        (0.9, "pass", "mean_pairwise_cosine 0.9 <= 0.9"),
        (-0.3, "pass", "mean_pairwise_cosine -0.3 <= 0.9"),
        (
            0.9001,
            "fail",
            "mean_pairwise_cosine 0.9001 > 0.9: the 24 new rows all point the same way",
        ),
    ],
)
def test_a_ceiling_passes_at_its_value_and_fails_above(reports, value, status, message):
    m = reports["random"].matrices[0]
    m = dataclasses.replace(m, new=dataclasses.replace(m.new, mean_pairwise_cosine=value))
    res = by_name(check_matrix(m, GateConfig()))["mean_pairwise_cosine"]
    assert (res.status, res.value) == (status, value) and res.message.startswith(message)


def test_undefined_mean_cosine_says_why(reports):
    m = reports["random"].matrices[0]
    m = dataclasses.replace(m, new=dataclasses.replace(m.new, mean_pairwise_cosine=None))
    (res,) = [c for c in check_matrix(m, GateConfig()) if c.name == "mean_pairwise_cosine"]
    assert res.status == "skip"
    assert (
        res.message
        == "mean_pairwise_cosine undefined: a new row has zero norm, so its direction is undefined"
    )


def test_an_undefined_reference_skips_the_spread_floor(reports):
    """No vocabulary to compare with is not the rows' fault: skipped, not failed."""
    m = reports["random"].matrices[0]
    m = dataclasses.replace(m, reference=None, reference_undefined_reason="no vocabulary")
    res = by_name(check_matrix(m, GateConfig()))["spread_relative"]
    assert (res.status, res.message) == ("skip", "spread_relative undefined: no vocabulary")


def test_a_disabled_check_skips_and_keeps_its_value(reports):
    m = reports["mean"].matrices[0]
    res = by_name(check_matrix(m, GateConfig(max_mean_cosine=None)))["mean_pairwise_cosine"]
    assert (res.status, res.threshold, res.message) == ("skip", None, DISABLED)
    assert res.value == pytest.approx(1.0)


def test_block_checks_skip_a_single_row(reports):
    m = dataclasses.replace(reports["random"].matrices[0], n_new=1)
    res = by_name(check_matrix(m, GateConfig()))
    for c in CHECKS:
        if c.scope == "block":
            want = DISABLED if c.default is None else f"{c.name} {SINGLE_ROW}"
            assert (res[c.name].status, res[c.name].message) == ("skip", want), c.name
    # Row checks still judge the one row.
    assert res["n_untrained"].status == "pass" and res["norm_ratio"].status == "pass"


def test_untrained_tokens_counts_and_names_the_rows(reports):
    m = reports["mean"].matrices[0]
    # The fixture's items leave some codes unused: their untrained rows nothing can reach.
    dead = sum(1 for t in m.untrained.tokens if t.n_items == 0)
    used = 24 - dead
    assert 0 < dead < 24 and m.untrained.untrained_unused.size == dead
    res = by_name(check_matrix(m, GateConfig()))["n_untrained"]
    assert (res.status, res.value, res.threshold) == ("fail", used, 0)
    # All 24 never left their init: both numbers are said, the counted and the spared, so
    # that "19 of 24" does not read as if 5 had been trained.
    assert res.message.startswith(
        f"n_untrained {used} > 0: 24 of 24 new rows never left their init"
    )
    tol = f"{m.untrained.tolerance:.2g}"
    assert f"1 group(s) of rows identical within {tol}" in res.message  # the tolerance named
    assert f"; {used} counted, as something feeds them: " in res.message
    assert f"; {dead} spared, as nothing feeds them (" in res.message
    assert "item IDs)" in res.message and "usage unknown" not in res.message
    # Counted only once every used one is allowed; the spared ones then warn.
    loose = by_name(check_matrix(m, GateConfig(max_untrained_tokens=used)))["n_untrained"]
    assert loose.status == "warn" and f"the {dead} spared cannot matter" in loose.message
    assert "no item's ID uses their codes" in loose.message
    # The rule at 0: every untrained row counts, as without usage.
    every = by_name(check_matrix(m, GateConfig(untrained_uses_to_fail=0)))["n_untrained"]
    assert (every.status, every.value) == ("fail", 24)
    allowed = GateConfig(max_untrained_tokens=24, untrained_uses_to_fail=0)
    assert by_name(check_matrix(m, allowed))["n_untrained"].status == "pass"


def test_norm_ratio_against_its_ceiling(reports):
    m = reports["random"].matrices[0]
    at = dataclasses.replace(m, norm_ratio=10.0)
    above = dataclasses.replace(m, norm_ratio=10.5)
    undefined = dataclasses.replace(m, norm_ratio=None)
    assert by_name(check_matrix(at, GateConfig()))["norm_ratio"].status == "pass"
    res = by_name(check_matrix(above, GateConfig()))["norm_ratio"]
    assert res.status == "fail" and res.message.startswith("norm_ratio 10.5 > 10: the longest")
    res = by_name(check_matrix(undefined, GateConfig()))["norm_ratio"]
    assert res.status == "skip" and "no original vocabulary" in res.message


def test_rsa_warns_when_off_and_judges_when_on(reports):
    grounded, random = reports["grounded"].matrices[0], reports["random"].matrices[0]
    off = by_name(check_matrix(random, GateConfig()))
    # Random rows carry no structure: p >= 0.05 at some level warns, never fails, when off.
    rsa = [c for c in off.values() if c.name.startswith("rsa[")]
    assert {c.status for c in rsa} <= {"pass", "warn"} and "warn" in {c.status for c in rsa}
    for c, lv in zip(rsa, random.levels, strict=True):
        assert c.status == ("warn" if lv.rsa.p_value >= 0.05 else "pass")
    on = GateConfig(min_rsa=0.5)
    for m in (grounded, random):
        for c, lv in zip(
            [c for c in check_matrix(m, on) if c.name.startswith("rsa[")], m.levels, strict=True
        ):
            assert c.status == ("pass" if lv.rsa.spearman >= 0.5 else "fail"), c
    assert all(lv.rsa.spearman >= 0.5 for lv in grounded.levels)


def test_an_unmeasured_rsa_level_skips_or_fails_by_threshold(reports):
    m = reports["grounded"].matrices[0]
    lv = dataclasses.replace(m.levels[0], rsa=None, rsa_skip_reason="no codebook: RSA skipped")
    m = dataclasses.replace(m, levels=[lv])
    (off,) = [c for c in check_matrix(m, GateConfig()) if c.name.startswith("rsa[")]
    assert (off.status, off.message) == ("skip", "rsa[a] not measured: no codebook")
    (on,) = [c for c in check_matrix(m, GateConfig(min_rsa=0.1)) if c.name.startswith("rsa[")]
    assert on.status == "fail"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cfg", [GateConfig(), GateConfig(min_effective_rank_ratio=0.9)])
def test_the_callbacks_collapse_test_fails_what_the_gate_fails(reports, kind, cfg):
    """Same checks, same verdicts and messages (less the explanation) as the gate, on every
    collapse check the snapshot's structure records."""
    report = reports[kind]
    structure = structure_of_report(report)
    gate = {
        c.name: c.message
        for c in run_gate(report, cfg).checks
        if c.status == "fail" and c.name in structure
    }
    collapse = {c.name: c.message for c in collapse_checks(structure, cfg)}
    assert set(collapse) == set(gate) - {"rsa"}
    assert all(gate[name].startswith(message) for name, message in collapse.items())
    assert bool(collapse) == (kind in ("mean", "mean-noise", "line") or cfg != GateConfig())


def test_collapse_test_covers_the_collapse_checks_the_snapshot_records():
    tested = {c.name for c in CHECKS if c.collapse and c.name in METRICS}
    assert tested == {"effective_rank_ratio", "spread_relative", "mean_pairwise_cosine"}
    undefined = {
        "effective_rank_ratio": None,
        "spread_relative": None,
        "mean_pairwise_cosine": None,
    }
    failed = collapse_checks(undefined, GateConfig())
    # an undefined floor fails, an undefined ceiling does not
    assert [c.message for c in failed] == [
        "effective_rank_ratio is undefined",
        "spread_relative is undefined",
    ]
    # a check the structure does not record is not tested
    assert (
        collapse_checks({"mean_pairwise_cosine": 0.95}, GateConfig())[0].name
        == "mean_pairwise_cosine"
    )
    assert collapse_checks({"mean_pairwise_cosine": 0.5}, GateConfig()) == []


# ---- thresholds from files ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("gate.toml", "min_spread_ratio = 0.5\nmax-mean-cosine = 1\n"),
        ("gate.toml", "[geodiag]\nmin_spread_ratio = 0.5\nmax-mean-cosine = 1\n"),
        ("pyproject.toml", "[tool.geodiag]\nmin_spread_ratio = 0.5\nmax-mean-cosine = 1\n"),
    ],
)
def test_load_config_reads_each_table_and_normalizes_keys(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    got = load_config(path)
    assert got == {"min_spread_ratio": 0.5, "max_mean_cosine": 1.0}
    assert isinstance(got["max_mean_cosine"], float)


def test_a_pyproject_without_a_geodiag_table_sets_nothing(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert load_config(tmp_path / "pyproject.toml") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("min_rank_typo = 3\n", "unknown gate setting 'min_rank_typo' (known: max_mean_cosine"),
        (
            'min_spread_ratio = "0.5"\n',
            "gate setting 'min_spread_ratio' must be a number, got '0.5'",
        ),
        ("max_mean_cosine = true\n", "gate setting 'max_mean_cosine' must be a number, got True"),
        ("min_spread_ratio = \n", "not valid TOML"),
    ],
)
def test_load_config_names_the_file_and_the_bad_setting(tmp_path, text, message):
    path = tmp_path / "gate.toml"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        load_config(path)
    assert e.value.where == str(path) and message in e.value.problem


def test_load_config_of_a_missing_file(tmp_path):
    with pytest.raises(InputError, match="config file not found"):
        load_config(tmp_path / "absent.toml")


def test_resolve_config_precedence(tmp_path):
    """Defaults < ./pyproject.toml's [tool.geodiag] < --config FILE < flags."""
    (tmp_path / "pyproject.toml").write_text(
        "[tool.geodiag]\nmin_spread_ratio = 0.2\nmax_mean_cosine = 0.8\n"
    )
    cfg_file = tmp_path / "gate.toml"
    cfg_file.write_text("max_mean_cosine = 0.7\nmax_norm_ratio = 4\n")
    none = dict.fromkeys(f.name for f in dataclasses.fields(GateConfig))
    assert resolve_config(None, none, cwd=tmp_path / "nowhere") == GateConfig()
    assert resolve_config(None, none, cwd=tmp_path) == GateConfig(
        min_spread_ratio=0.2, max_mean_cosine=0.8
    )
    # A config file replaces pyproject.toml (it is not read at all then).
    assert resolve_config(cfg_file, none, cwd=tmp_path) == GateConfig(
        max_mean_cosine=0.7, max_norm_ratio=4.0
    )
    flags = {**none, "max_norm_ratio": 2.0}
    assert resolve_config(cfg_file, flags, cwd=tmp_path) == GateConfig(
        max_mean_cosine=0.7, max_norm_ratio=2.0
    )


def test_with_overrides_ignores_what_was_not_given():
    cfg = GateConfig(min_spread_ratio=0.3)
    assert with_overrides(cfg, {"min_spread_ratio": None, "max_mean_cosine": 0.5}) == GateConfig(
        min_spread_ratio=0.3, max_mean_cosine=0.5
    )
