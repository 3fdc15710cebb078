"""The registry of check units (geodiag.gate.checks): the names (CheckName) and the values
built from the units; the gate's readers and a trajectory's record of a full analysis read
the same value."""

from __future__ import annotations

import json

import numpy as np
import pytest
from geodiag_fixtures import DIM

import geodiag
from geodiag.gate.checks import (
    CHECKS,
    VALUES,
    CheckName,
    CheckResult,
    GateConfig,
    check_matrix,
    rsa_by_level,
    shown_name,
)
from geodiag.gate.trajectory import structure_of_report
from geodiag.jsonio import dumps


def test_every_check_of_the_table_is_a_name_of_the_enumeration_and_back():
    assert [c.name for c in CHECKS] == list(CheckName)
    assert all(isinstance(c.name, CheckName) for c in CHECKS)
    # every block and row check reads its value from the map; the level check per level,
    # the checkpoint check from the report's audit findings
    assert {c.name for c in CHECKS if c.scope in ("block", "row")} == set(VALUES)


@pytest.mark.parametrize("kind", ["mean", "line", "random", "grounded"])
def test_the_gate_and_the_trajectory_record_read_the_same_values(make_ckpt, kind):
    report = geodiag.measure(make_ckpt(kind), n_permutations=10, neighbors=0)
    m = report.matrices[0]
    on = GateConfig(min_effective_rank=1.0, min_rsa=0.0)  # every check enabled
    results = check_matrix(m, on)
    structure = structure_of_report(report)
    for c in results:
        if c.check is CheckName.RSA:
            assert structure[CheckName.RSA][c.level] == c.value == rsa_by_level(m)[c.level]
        elif c.value is not None:
            assert c.value == VALUES[c.check](m)
            if c.check in structure:
                assert structure[c.check] == c.value
    assert {c.level for c in results if c.check is CheckName.RSA} == {lv.name for lv in m.levels}


def test_a_level_result_carries_its_level_and_shows_the_old_name():
    c = CheckResult(CheckName.RSA, "input", "pass", 0.5, None, "RSA 0.500", "b")
    assert (c.name, c.check, c.level) == ("rsa[b]", CheckName.RSA, "b")
    assert shown_name(CheckName.SPREAD_RELATIVE) == "spread_relative"
    # The JSON is as it was: the shown name, no check or level key.
    assert json.loads(dumps(c)) == {
        "name": "rsa[b]",
        "matrix": "input",
        "status": "pass",
        "value": 0.5,
        "threshold": None,
        "message": "RSA 0.500",
    }
    assert dumps({CheckName.RSA: CheckName.MEAN_PAIRWISE_COSINE}) == dumps(
        {"rsa": "mean_pairwise_cosine"}
    )


def test_every_unit_module_is_registered_once_and_holds_one_check():
    """Adding a check is a module of geodiag/gate/checks/ and a line in UNITS: a module
    left out of the registry, or a unit listed twice, fails here."""
    import importlib
    import pkgutil

    import geodiag.gate.checks as registry

    modules = sorted(m.name for m in pkgutil.iter_modules(registry.__path__) if m.name != "unit")
    units = [importlib.import_module(f"geodiag.gate.checks.{m}").CHECK for m in modules]
    assert sorted(u.name for u in units) == sorted(u.name for u in registry.UNITS)
    assert len(set(registry.UNITS)) == len(registry.UNITS)
    # and each unit's module is named after its check
    assert [u.name for u in units] == modules


def test_the_verdict_explains_by_the_units_ranks(make_ckpt):
    """The most specific cause first: rows no init ran on (n_untrained's own rank) before a
    point collapse (spread, cosine), before a thin subspace, before the rest; rows a mean
    init wrote are a point collapse before they are untrained."""
    by = {c.name: c for c in CHECKS}
    zero = geodiag.measure(make_ckpt(np.zeros((24, DIM))), n_permutations=0, neighbors=0)
    mean = geodiag.measure(make_ckpt("mean"), n_permutations=0, neighbors=0)
    z, m = zero.matrices[0], mean.matrices[0]
    assert by[CheckName.N_UNTRAINED].rank_of(z) < by[CheckName.SPREAD_RELATIVE].rank_of(z)
    assert by[CheckName.N_UNTRAINED].rank_of(m) > by[CheckName.EFFECTIVE_RANK].rank_of(m)
    order = ("spread_relative", "effective_rank", "norm_ratio", "vocabulary_disagreements", "rsa")
    ranks = [by[CheckName(n)].rank_of(m) for n in order]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    # and the verdicts say so: no init ran on the zero rows; the mean init is named
    assert "all zero" in geodiag.check(zero.path).verdict
    assert "mean initialization" in geodiag.check(mean.path).verdict
