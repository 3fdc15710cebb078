"""geodiag.measure / geodiag.check on a path, a numpy array and a torch tensor.

The reference for every in-memory result is the file reading path on the same rows:
the same numbers must come out, whichever way in.
"""

import subprocess
import sys

import numpy as np
import pytest
from geodiag_fixtures import BASE_VOCAB, LEVELS, base_rows, codebooks, planted_new_rows

import geodiag
from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.analysis.options import AnalyzeOptions
from geodiag.errors import InputError
from geodiag.gate.checks import GateConfig
from geodiag.jsonio import to_jsonable

N_NEW = sum(k for _, k in LEVELS)
LEVEL_IDS = {}
_next = BASE_VOCAB
for _name, _k in LEVELS:
    LEVEL_IDS[_name] = list(range(_next, _next + _k))
    _next += _k


def matrix_json(report, i=0):
    """A matrix's numbers, without what names a source (tensor name and file, neighbour
    strings)."""
    d = to_jsonable(report.matrices[i])
    d.pop("tensor")
    d.pop("file")
    d.pop("dtype")
    d["neighbors"] = [[(n["id"], n["cosine"]) for n in t["nearest"]] for t in d["neighbors"]]
    # Which untrained tokens are dead codes (and items per code) needs the sidecar's item
    # map: a file has one, rows in memory with their levels do not.
    u = d["untrained"]
    # So does which untrained tokens something feeds (the item IDs are one source).
    usage = ("usage_sources", "untrained_used", "untrained_unused", "untrained_usage_unknown")
    for key in ("dead_codes", "usage_movement", "n_flagged", *usage):
        u.pop(key)
    u["tokens"] = [
        {
            **t,
            "n_items": None,
            "uses": None,
            "used_by": {},
            "usage_known": None,
            "findings": [f for f in t["findings"] if f != "dead_code"],
        }
        for t in u["tokens"]
    ]
    u["tokens"] = [t for t in u["tokens"] if t["findings"]]
    return d


def full(kind):
    base = base_rows()
    return np.concatenate([base, planted_new_rows(kind, base)]).astype(np.float32)


@pytest.mark.parametrize("kind", ["mean", "random", "grounded"])
def test_numpy_array_gives_the_file_paths_numbers(make_ckpt, kind):
    opts = AnalyzeOptions(n_permutations=200)
    from_file = measure_checkpoint(make_ckpt(kind), opts)
    in_memory = geodiag.measure(full(kind), levels=LEVEL_IDS, codebooks=codebooks(), options=opts)
    # Same float32 rows, same float64 arithmetic, same seeds: equal to the last bit.
    assert matrix_json(in_memory) == matrix_json(from_file)
    assert in_memory.n_new_tokens == N_NEW and in_memory.base_vocab_size == BASE_VOCAB
    assert in_memory.store == "in-memory numpy array"
    assert in_memory.matrices[0].neighbors[0].token == "<a_0>"  # named from the levels


def test_torch_tensor_equals_numpy():
    torch = pytest.importorskip("torch")
    rows = full("grounded")
    kw = dict(levels=LEVEL_IDS, codebooks=codebooks(), n_permutations=100)
    a = geodiag.measure(rows, **kw)
    b = geodiag.measure(torch.from_numpy(rows), **kw)
    assert matrix_json(a) == matrix_json(b)
    bf16 = geodiag.measure(torch.from_numpy(rows).to(torch.bfloat16), **kw)
    assert bf16.matrices[0].dtype == "BF16"
    # bf16 keeps 8 significand bits: relative rounding 2^-9 per entry moves the figures a little.
    assert bf16.matrices[0].new.spread_relative == pytest.approx(
        a.matrices[0].new.spread_relative, rel=1e-2
    )


def test_new_ids_in_any_order_without_levels():
    rows = full("random")
    ids = np.arange(BASE_VOCAB, BASE_VOCAB + N_NEW)
    a = geodiag.measure(rows, new_ids=ids, neighbors=0)
    b = geodiag.measure(rows, new_ids=ids[::-1].tolist(), neighbors=0)
    assert a.matrices[0].new.spread_relative == pytest.approx(b.matrices[0].new.spread_relative)
    assert a.matrices[0].levels == [] and "RSA skipped" in " ".join(a.notes)


def test_check_returns_the_gates_result():
    assert not geodiag.check(full("mean"), levels=LEVEL_IDS).passed
    res = geodiag.check(full("random"), levels=LEVEL_IDS, codebooks=codebooks())
    assert res.passed
    names = {c.name for c in res.checks}
    assert {"effective_rank_ratio", "spread_relative", "mean_pairwise_cosine", "rsa[a]"} <= names
    # a threshold keyword overrides the defaults; a GateConfig replaces them
    assert not geodiag.check(full("random"), levels=LEVEL_IDS, min_spread_ratio=100.0).passed
    assert not geodiag.check(
        full("random"), new_ids=LEVEL_IDS["a"], config=GateConfig(min_effective_rank=50.0)
    ).passed


def test_check_reads_a_toml_config(tmp_path):
    cfg = tmp_path / "gate.toml"
    cfg.write_text("[tool.geodiag]\nmin_spread_ratio = 100\n")
    assert not geodiag.check(full("random"), levels=LEVEL_IDS, config=cfg).passed


def test_path_source_matches_the_cli_and_takes_overrides(make_ckpt):
    path = make_ckpt("grounded", with_sidecar=False, with_tokenizer=False, with_codebooks=False)
    with pytest.raises(InputError, match="cannot tell which rows are new"):
        geodiag.measure(path)
    rep = geodiag.measure(path, levels=LEVEL_IDS, codebooks=codebooks(), n_permutations=100)
    assert [lv.name for lv in rep.matrices[0].levels] == ["a", "b", "c"]
    assert all(lv.rsa is not None and lv.rsa.spearman > 0.5 for lv in rep.matrices[0].levels)
    same = measure_checkpoint(make_ckpt("grounded", name="g2"), AnalyzeOptions(n_permutations=100))
    assert matrix_json(rep)["levels"] == matrix_json(same)["levels"]


def test_levels_from_a_sidecar_file(make_ckpt):
    path = make_ckpt("grounded")
    rep = geodiag.measure(full("grounded"), levels=path / "semantic_ids.json", n_permutations=50)
    assert rep.new_token_source == "sidecar"
    # codebooks.safetensors beside the sidecar is used when codebooks= is not given
    assert all(lv.rsa is not None for lv in rep.matrices[0].levels)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "which rows are new"),
        ({"new_ids": [BASE_VOCAB, BASE_VOCAB + 1000]}, "out of range"),
        ({"new_ids": [BASE_VOCAB, BASE_VOCAB]}, "repeat"),
        ({"new_ids": [0, 1, 2]}, "must be non-empty and below every new id"),
        ({"new_ids": [BASE_VOCAB], "levels": LEVEL_IDS}, "differ from the token ids"),
        (
            {"levels": LEVEL_IDS, "codebooks": {"a": np.ones((3, 2))}},
            "codebook 'a' has 3 codes, but level 'a' has 8",
        ),
        ({"levels": LEVEL_IDS, "codebooks": {"a": np.ones(8)}}, "codebook 'a' has shape \\[8\\]"),
        ({"levels": LEVEL_IDS, "codebooks": {"a": np.full((8, 2), np.nan)}}, "NaN"),
    ],
)
def test_bad_arguments_name_the_problem(kwargs, message):
    with pytest.raises(InputError, match=message):
        geodiag.measure(full("random"), **kwargs)


def test_bad_matrices_are_input_errors():
    with pytest.raises(InputError, match="expected a \\(vocab, dim\\) matrix"):
        geodiag.measure(np.zeros(10), new_ids=[5])
    with pytest.raises(InputError, match="floating-point"):
        geodiag.measure(np.zeros((10, 3), np.int64), new_ids=[5])
    rows = full("random")
    rows[BASE_VOCAB + 2, 0] = np.nan
    with pytest.raises(InputError, match="NaN/Inf"):
        geodiag.measure(rows, new_ids=range(BASE_VOCAB, BASE_VOCAB + N_NEW))


def test_import_geodiag_stays_light():
    code = (
        "import sys, geodiag\n"
        "heavy = [m for m in ('torch', 'transformers', 'numpy', 'scipy') if m in sys.modules]\n"
        "import numpy as np\n"
        "rows = np.random.default_rng(0).normal(size=(50, 8))\n"
        "res = geodiag.check(rows, new_ids=range(40, 50))\n"
        "heavy += [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "print(heavy, res.passed)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "True"], out.stdout
