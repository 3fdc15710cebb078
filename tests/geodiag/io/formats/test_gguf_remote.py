"""GGUF files read by URL (geodiag.io.sources.remote -> geodiag.io.formats.gguf over byte ranges), against
range_server.py: the verdict and the metrics are the local file's, and a large vocabulary
costs its header and the rows read, a small fraction of the file."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.formats.gguf import GGUFStore
from geodiag.io.sources import byte_ranges
from geodiag.io.vocabulary.tokenizer import gguf_tokenizer
from tests.geodiag.geodiag_fixtures import (
    BASE_VOCAB,
    SID_NAMES,
    base_rows,
    planted_new_rows,
    write_gguf,
)
from tests.geodiag.io.sources.test_remote import _comparable, _metrics, serve  # noqa: F401

gguf = pytest.importorskip("gguf")
runner = CliRunner()
REPO = "org/tiny-sid-GGUF"


def _emb(kind: str) -> np.ndarray:
    base = base_rows()
    return np.concatenate([base, planted_new_rows(kind, base)])


@pytest.mark.parametrize("kind", ["grounded", "mean"])
def test_gguf_url_gives_the_local_verdict_and_metrics(tmp_path, serve, kind):  # noqa: F811
    (tmp_path / "m").mkdir()
    g = write_gguf(tmp_path / "m" / "model-Q8_0.gguf", _emb(kind), qtype="Q8_0")
    server = serve(tmp_path)
    url = f"{server.url}/m/model-Q8_0.gguf"
    local = runner.invoke(app, ["check", str(g), "--json", "--permutations", "20"])
    remote = runner.invoke(app, ["check", url, "--json", "--permutations", "20"])
    assert remote.exit_code == local.exit_code == (0 if kind == "grounded" else 1), remote.output
    assert _comparable(json.loads(remote.stdout)) == _comparable(json.loads(local.stdout))
    assert _comparable(_metrics(url)) == _comparable(_metrics(str(g)))
    # Only ranges of the weights file: never one GET of the whole of it.
    gets = [r for r in server.requests() if r["path"].endswith(".gguf") and r["method"] == "GET"]
    assert gets and all(r["range"] for r in gets)


def test_hf_gguf_file_url_with_its_sidecar_beside(tmp_path, serve, monkeypatch, make_ckpt):  # noqa: F811
    ck = make_ckpt("grounded")
    root = tmp_path / "hub"
    root.mkdir()
    write_gguf(root / "model-Q4_0.gguf", _emb("grounded"), qtype="Q4_0")
    shutil.copy(ck / "semantic_ids.json", root / "semantic_ids.json")
    server = serve(root, "--prefix", f"/{REPO}/resolve/main")
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    url = f"hf://{REPO}/model-Q4_0.gguf"
    remote = _metrics(url)
    assert remote["path"] == f"hf://{REPO}"
    assert remote["new_token_source"] == "sidecar"
    assert _comparable(remote) == _comparable(_metrics(str(root / "model-Q4_0.gguf")))
    # drift between the checkpoint and its GGUF by URL: what quantization did, as locally.
    args = ["drift", str(ck), "--json", "--permutations", "20"]
    there = runner.invoke(app, [*args[:2], str(root / "model-Q4_0.gguf"), *args[2:]])
    here = runner.invoke(app, [*args[:2], url, *args[2:]])
    assert here.exit_code == there.exit_code == 0, here.output
    q = lambda res: json.loads(res.stdout)[0]["quantization"]  # noqa: E731
    assert q(here) == q(there)


N_BIG, D_BIG = 60_000, 512  # 32.6 MB of Q8_0 embedding, three times the vocabulary sample


def test_a_large_vocabulary_gguf_costs_a_small_fraction_of_the_file(tmp_path, serve):  # noqa: F811
    """60,000 tokens: the header (token list and types, ~1.2 MB) is read in a doubling
    window, then the new rows and the sampled vocabulary blocks; the verdict is the local one."""
    rng = np.random.default_rng(0)
    scales = np.linspace(0.2, 0.02, D_BIG)
    base = (rng.standard_normal((N_BIG, D_BIG)) * scales + 0.05).astype(np.float32)
    new = base.mean(axis=0) + 1e-6 * rng.standard_normal((len(SID_NAMES), D_BIG))  # untrained
    tokens = ["<|endoftext|>", *(f"tok{i}" for i in range(1, N_BIG)), *SID_NAMES]
    types = [3] + [1] * (N_BIG - 1) + [4] * len(SID_NAMES)
    (tmp_path / "big").mkdir()
    path = tmp_path / "big" / "model-Q8_0.gguf"
    write_gguf(path, np.concatenate([base, new]), qtype="Q8_0", tokens=tokens, types=types)
    server = serve(tmp_path)
    url = f"{server.url}/big/model-Q8_0.gguf"
    local = runner.invoke(app, ["check", str(path), "--json"])
    remote = runner.invoke(app, ["check", url, "--json"])
    assert remote.exit_code == local.exit_code == 1, remote.output
    statuses = lambda res: [  # noqa: E731
        (c["name"], c["matrix"], c["status"])
        for c in json.loads(res.stdout)["results"][0]["checks"]
    ]
    assert statuses(remote) == statuses(local)
    size = path.stat().st_size
    header = GGUFStore(path).data_offset
    row = GGUFStore(path).tensors["token_embd.weight"].row_bytes
    sent = server.bytes_sent(".gguf")
    n_sample, k = 200, 20  # vocabulary_sample_size(24 new rows): 20 blocks of 10
    bound = 2 * header + (24 + n_sample) * row + k * byte_ranges.COALESCE_GAP
    assert sent <= bound < 0.25 * size, (sent, bound, size)
    assert sent < 0.1 * size, (sent, size)
    print(f"GGUF: header {header} B, file {size} B, sent {sent} B ({sent / size:.1%})")


def test_truncated_and_missing_remote_gguf_exit_2_naming_the_url(tmp_path, serve):  # noqa: F811
    good = write_gguf(tmp_path / "good.gguf", _emb("grounded"), qtype="Q8_0").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(good[: len(good) - 100])
    (tmp_path / "head.gguf").write_bytes(good[:200])
    server = serve(tmp_path)
    for name, problem in (
        ("cut.gguf", "past the end of the file"),
        ("head.gguf", "truncated or corrupt GGUF header"),
        ("absent.gguf", "not found on the server (HTTP 404)"),
    ):
        url = f"{server.url}/{name}"
        res = runner.invoke(app, ["check", url])
        assert res.exit_code == 2, res.output
        line = res.output.strip().splitlines()[-1]
        assert line.startswith(f"error: {url}: ") and problem in line, line


def test_a_pickle_url_is_refused_by_name(tmp_path, serve):  # noqa: F811
    server = serve(tmp_path)
    res = runner.invoke(app, ["check", f"{server.url}/ckpt/pytorch_model.bin"])
    assert res.exit_code == 2 and "not read remotely" in res.output, res.output


def test_local_gguf_header_windows_agree_with_one_read(tmp_path, monkeypatch):
    """The doubling window parses as a whole-file read does, however small it starts."""
    from geodiag.io.formats import gguf as gguf_mod

    path = write_gguf(tmp_path / "m.gguf", _emb("grounded"), qtype="Q8_0")
    whole = GGUFStore(path)
    monkeypatch.setattr(gguf_mod, "HEADER_WINDOW", 64)
    small = GGUFStore(path)
    assert small.tensors == whole.tensors and small.metadata == whole.metadata
    assert small.digest.hexdigest() == whole.digest.hexdigest()
    tok = gguf_tokenizer(small)
    assert [t.id for t in tok.added_non_special()] == list(range(BASE_VOCAB, BASE_VOCAB + 24))
    ids = np.array([0, BASE_VOCAB + 3, 7], np.int64)
    np.testing.assert_array_equal(
        small.read_rows("token_embd.weight", ids), whole.read_rows("token_embd.weight", ids)
    )
