"""The registry of check units (geodiag.gate.checks): the names (CheckName) and the values
built from the units; the gate's readers and a trajectory's record of a full analysis read
the same value."""

from __future__ import annotations

import json

import pytest

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
