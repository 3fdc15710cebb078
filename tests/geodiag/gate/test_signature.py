"""The init signature (geodiag.gate.signature): what a sidecar says its rows are, or what
their statistics show, and the verdict's words from it; never an init strategy's name in
geodiag's code."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from geodiag_fixtures import DIM, LEVELS, base_rows, codebooks, planted_new_rows, write_checkpoint

from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.analysis.options import AnalyzeOptions
from geodiag.gate.checks import GateConfig, run_gate
from geodiag.gate.signature import SIGNATURES, fingerprint, from_provenance
from geodiag.gate.verdict import verdict

GEODIAG = Path(__file__).resolve().parents[3] / "geodiag"
OPTS = AnalyzeOptions(n_permutations=200, neighbors_max=0)


def diagnose(path, cfg=None):
    report = measure_checkpoint(path, OPTS)
    return report, verdict(report, run_gate(report, cfg or GateConfig()))


def prov(**kw) -> dict:
    return {"stage": "init", "step": 0, "seed": 0, **kw}


def _compared_strings(tree: ast.AST):
    """Every string constant a comparison tests against (==, !=, in, not in), with its line;
    but a test of the stack's name ("gti" is a stack's name too: geodiag.io.stack)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or "stack" in ast.unparse(node.left):
            continue
        for side in [node.left, *node.comparators]:
            elts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            for e in elts:
                if isinstance(e, ast.Constant) and isinstance(e.value, str):
                    yield e.value, node.lineno


def test_geodiag_branches_on_no_init_strategys_name():
    """The verdict knows each init by its signature, not by gti's name for it: no comparison
    in geodiag's code tests a strategy's name (the old verdict tested "mean", "mean-noise",
    "gti" and "random")."""
    gti_init = pytest.importorskip("gti.init")
    names = set(gti_init.REGISTRY) | {"gti"}
    found = [
        f"{path.relative_to(GEODIAG.parent)}:{line}: {value!r}"
        for path in sorted(GEODIAG.rglob("*.py"))
        for value, line in _compared_strings(ast.parse(path.read_text(encoding="utf-8")))
        if value in names
    ]
    assert found == []


def test_every_gti_strategy_states_a_signature_geodiag_knows():
    gti_init = pytest.importorskip("gti.init")
    assert set(gti_init.SIGNATURE) == set(gti_init.REGISTRY)
    assert set(gti_init.SIGNATURE.values()) <= set(SIGNATURES)
    for start in gti_init.REGISTRY:
        got = gti_init.signature("gti", start)
        assert got == {"init_signature": "trained", "start_signature": gti_init.SIGNATURE[start]}
        sig = from_provenance(prov(init_strategy="gti", step=7, **got))
        assert (sig.name, sig.start, sig.steps, sig.source) == (
            "trained",
            gti_init.SIGNATURE[start],
            7,
            "sidecar",
        )


def test_a_sidecars_signature_is_read_and_its_untrusted_fields_checked():
    sig = from_provenance(
        prov(init_strategy="codebook-projection", init_signature="code-projection")
    )
    assert (sig.name, sig.strategy, sig.start, sig.steps) == (
        "code-projection",
        "codebook-projection",
        None,
        None,
    )
    # A name this version does not know: no signature (the statistics speak instead).
    assert from_provenance(prov(init_signature="fancy-new-draw")) is None
    # A strategy name that is not plain is never repeated into the verdict's words.
    hostile = from_provenance(prov(init_strategy="mean`\n::error::x", init_signature="identical"))
    assert hostile.name == "identical" and hostile.strategy is None
    # A start or a step count of the wrong type is dropped, not trusted.
    odd = from_provenance(prov(init_signature="trained", start_signature="<b>", step=True))
    assert (odd.name, odd.start, odd.steps) == ("trained", None, None)
    # A sidecar from before the field is read by the format it had then: its closed set of
    # strategies (a grounded one started from the mean unless it says otherwise); a strategy
    # added since, written before the field, says nothing the verdict could rest on.
    old = from_provenance(prov(init_strategy="gti", step=40))
    assert (old.name, old.start, old.steps) == ("trained", "identical", 40)
    assert from_provenance(prov(init_strategy="mean")).name == "identical"
    assert from_provenance(prov(init_strategy="full-covariance")) is None
    assert from_provenance({"stage": "sft", "step": 30}) is None


def _measured(tmp_path, name, rows, **kw):
    report = measure_checkpoint(write_checkpoint(tmp_path / name, rows, **kw), OPTS)
    return report.matrices[0]


def test_the_statistics_name_only_the_draws_they_can_tell(tmp_path):
    """Identical rows, N(mean, 1e-9 Sigma) and mean + N(0, 1/d) each have a statistic of their
    own; an isotropic or a vocabulary-shaped draw at the vocabulary's scale has none."""
    base = base_rows()
    rng = np.random.default_rng(4)
    n = sum(k for _, k in LEVELS)
    unit = base.mean(axis=0) + rng.normal(size=(n, DIM)) / np.sqrt(DIM)
    cov = np.cov(base, rowvar=False)
    full = rng.multivariate_normal(base.mean(axis=0), cov, size=n)
    expected = {
        "mean": ("identical", planted_new_rows("mean", base)),
        "mean-noise": ("near-identical", planted_new_rows("mean-noise", base)),
        "unit": ("unit-noise", unit),
        "random": (None, planted_new_rows("random", base)),
        "full": (None, full),
    }
    for name, (want, rows) in expected.items():
        assert fingerprint(_measured(tmp_path, name, rows)) == want, name


def _isometry(k: int, seed: int = 0) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(DIM, k)))
    return q  # (DIM, k), orthonormal columns


def test_projected_code_vectors_are_named_by_the_sidecar_not_guessed_as_a_line(tmp_path):
    """Code vectors through one isometry span at most the codebooks' dimension (6 of 24):
    under a rank floor of 0.5 the rank check fails, and the verdict says what the sidecar
    says the rows are, instead of guessing "multiples of one vector"."""
    books = codebooks()
    q = _isometry(next(iter(books.values())).shape[1])
    rows = np.concatenate([books[name] @ q.T for name, _ in LEVELS]) * 0.2
    p = prov(init_strategy="codebook-projection", init_signature="code-projection")
    ckpt = write_checkpoint(tmp_path / "cp", rows, provenance=p)
    report, v = diagnose(ckpt, GateConfig(min_effective_rank_ratio=0.5))
    failed = {c.name for c in v.checks if c.status == "fail"}
    assert failed == {"effective_rank_ratio"}, v.sentence
    assert report.matrices[0].new.centered.effective_rank <= 6 + 1e-9
    assert "multiples of one vector" not in v.sentence
    assert v.cause == (
        "the sidecar says `gti init --strategy codebook-projection`: the codebooks' code "
        "vectors mapped into the embedding space, which span at most the codebooks' own dimension"
    )
    assert "`--start-from codebook-projection`" in v.remedy
    # The same rows with nothing said of them keep the shape's own guess.
    _, plain = diagnose(
        write_checkpoint(tmp_path / "plain", rows), GateConfig(min_effective_rank_ratio=0.5)
    )
    assert "multiples of one vector" in plain.sentence


def test_averages_of_rows_that_share_a_direction_are_not_called_a_mean_init(tmp_path):
    """Each row the mean of 100 vocabulary rows, over a vocabulary with a shared offset (as
    real embeddings have): they all point the offset's way (mean cosine > 0.9) without being
    one point. The verdict says the rows are averages, as the sidecar says, and not "as after
    mean initialization"."""
    base = base_rows() + 0.05
    rng = np.random.default_rng(6)
    n = sum(k for _, k in LEVELS)
    rows = np.stack(
        [base[rng.choice(len(base), 100, replace=False)].mean(axis=0) for _ in range(n)]
    )
    p = prov(init_strategy="description-mean", init_signature="text-average")
    report, v = diagnose(write_checkpoint(tmp_path / "avg", rows, base=base, provenance=p))
    failed = {c.name for c in v.checks if c.status == "fail"}
    assert failed == {"mean_pairwise_cosine"}, v.sentence
    assert "a shared offset dominates them" in v.sentence
    assert "as after mean initialization" not in v.sentence
    assert "averages of existing rows read from text" in v.cause
    _, plain = diagnose(write_checkpoint(tmp_path / "plain", rows, base=base))
    assert "as after mean initialization" in plain.sentence


def test_a_vocabulary_draw_without_structure_is_as_expected_of_it(tmp_path):
    base = base_rows()
    rng = np.random.default_rng(7)
    n = sum(k for _, k in LEVELS)
    rows = rng.multivariate_normal(base.mean(axis=0), np.cov(base, rowvar=False), size=n)
    p = prov(init_strategy="full-covariance", init_signature="vocabulary-draw")
    _, v = diagnose(write_checkpoint(tmp_path / "fc", rows, provenance=p))
    assert v.status == "warn", v.sentence
    assert v.cause == (
        "as expected of rows drawn from the vocabulary's own distribution, N(mean, covariance) "
        "(the sidecar says `gti init --strategy full-covariance`)"
    )


def test_a_short_grounding_names_its_start_and_steps(tmp_path):
    base = base_rows()
    rows = planted_new_rows("mean", base) + np.random.default_rng(8).normal(size=(24, DIM)) * 1e-4
    p = prov(init_strategy="gti", init_signature="trained", start_signature="identical", step=12)
    _, v = diagnose(write_checkpoint(tmp_path / "g", rows, provenance=p))
    assert v.status == "fail"
    assert v.cause.startswith(
        "an init grounded for 12 steps from one vector repeated (an exact mean) still looks "
        "like its start"
    )


def test_an_untrusted_strategy_name_never_reaches_the_words(tmp_path):
    p = prov(init_strategy="mean`\n::error::forged", init_signature="identical")
    _, v = diagnose(
        write_checkpoint(tmp_path / "h", planted_new_rows("mean", base_rows()), provenance=p)
    )
    assert "forged" not in v.sentence and "::error::" not in v.sentence
    assert v.cause == "the sidecar says the rows are one vector repeated (an exact mean)"
