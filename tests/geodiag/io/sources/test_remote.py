"""Checkpoints read in place over HTTP (geodiag.io.sources.remote): against a real server process
(range_server.py) that serves byte ranges and logs the bytes it sends, the verdict and the
metrics are the local folder's, and the weights cost only their header and the rows read."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.formats.safetensors import SafetensorsFile, save_file
from geodiag.io.sources import byte_ranges
from tests.geodiag.geodiag_fixtures import DIM, base_rows, planted_new_rows, write_checkpoint
from tests.geodiag.io.range_server import read_log

SERVER = Path(__file__).resolve().parents[1] / "range_server.py"
runner = CliRunner()
TOKEN = "hf_secret_test_token_123"
REPO = "org/tiny-sid"


class Server:
    """range_server.py on a free port, serving ``root``; stopped by :meth:`stop`."""

    def __init__(self, root: Path, log: Path, *args: str) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), str(root), str(log), *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.port = int(self.proc.stdout.readline())
        self.url = f"http://127.0.0.1:{self.port}"

    def requests(self) -> list[dict]:
        return read_log(self.log)

    def bytes_sent(self, name: str = "") -> int:
        return sum(r["bytes"] for r in self.requests() if r["path"].endswith(name))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def serve(tmp_path):
    servers = []

    def start(root: Path, *args: str) -> Server:
        s = Server(root, tmp_path / f"log{len(servers)}.jsonl", *args)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def big_checkpoint(
    root: Path, n_base: int = 20_000, layer_rows: int = 4096, kind: str = "grounded"
) -> Path:
    """A checkpoint whose original vocabulary is large beside its 24 new rows, with a
    transformer layer larger than the embedding, as in real models."""
    base = np.concatenate([base_rows(seed=s) for s in range(n_base // 300 + 1)])[:n_base]
    rows = planted_new_rows(kind, base)
    write_checkpoint(root, rows, base=base)
    f = SafetensorsFile(root / "model.safetensors")
    tensors = {name: f.read(name).astype(np.float32) for name in f.keys()}
    tensors["model.layers.1.mlp.weight"] = np.ones((layer_rows, 1024), np.float32)
    save_file(tensors, root / "model.safetensors")
    return root


def _metrics(target: str) -> dict:
    res = runner.invoke(app, ["metrics", target, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _comparable(report: dict) -> dict:
    """The report less where it was read from (path, file, digests keyed by file)."""
    if isinstance(report, dict):
        return {
            k: _comparable(v) for k, v in report.items() if k not in ("path", "file", "digests")
        }
    if isinstance(report, list):
        return [_comparable(v) for v in report]
    return report


def test_https_folder_reads_as_the_local_folder_at_a_fraction_of_the_bytes(tmp_path, serve):
    ckpt = big_checkpoint(tmp_path / "ckpt")
    server = serve(tmp_path)
    url = f"{server.url}/ckpt"
    local, remote = _metrics(str(ckpt)), _metrics(url)
    assert remote["path"] == url
    # No larger than the sample (AnalyzeOptions.vocabulary_sample_rows): read whole, exact.
    assert remote["matrices"][0]["vocabulary_sample"] is None
    assert _comparable(remote) == _comparable(local)
    weights = (ckpt / "model.safetensors").stat().st_size
    embedding = 20_024 * DIM * 4
    sent = server.bytes_sent("model.safetensors")
    # The header, the new rows, and the vocabulary pass over every original row
    # (geodiag.analysis.vocabulary): the embedding once, the 16 MB layer never.
    assert sent < 1.2 * embedding < 0.2 * weights, (sent, embedding, weights)
    print(f"weights {weights} B, embedding {embedding} B, sent {sent} B ({sent / weights:.1%})")


def test_check_gives_the_local_verdict_and_exit_code(tmp_path, serve):
    ckpt = tmp_path / "ckpt"
    write_checkpoint(ckpt, planted_new_rows("mean", base_rows()), sharded=True)
    server = serve(tmp_path)
    local = runner.invoke(app, ["check", str(ckpt), "--json"])
    remote = runner.invoke(app, ["check", f"{server.url}/ckpt", "--json"])
    assert remote.exit_code == local.exit_code == 1, remote.output
    assert _comparable(json.loads(remote.stdout)) == _comparable(json.loads(local.stdout))
    # Only the shard holding the embedding is opened: the layer's shard is never asked for.
    paths = [r["path"] for r in server.requests()]
    assert any(p.endswith("model-00001-of-00002.safetensors") for p in paths)
    assert not any(p.endswith("model-00002-of-00002.safetensors") for p in paths)


def hf_layout(tmp_path: Path) -> Path:
    """The Hub's resolve route on disk: the server serves ``/org/name/resolve/main/...``."""
    write_checkpoint(tmp_path / "hub", planted_new_rows("grounded", base_rows()))
    return tmp_path / "hub"


def test_hf_url_with_token(tmp_path, serve, monkeypatch):
    root = hf_layout(tmp_path)
    server = serve(root, "--prefix", f"/{REPO}/resolve/v1/sub", "--token", TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    remote = _metrics(f"hf://{REPO}@v1/sub")
    assert remote["path"] == f"hf://{REPO}@v1/sub"
    assert _comparable(remote) == _comparable(_metrics(str(root)))
    assert TOKEN not in json.dumps(remote)


def test_hf_url_refused_without_token(tmp_path, serve, monkeypatch):
    server = serve(hf_layout(tmp_path), "--prefix", f"/{REPO}/resolve/main", "--token", TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    res = runner.invoke(app, ["check", f"hf://{REPO}"])
    assert res.exit_code == 2
    assert f"hf://{REPO}/" in res.output and "401" in res.output and "HF_TOKEN" in res.output
    assert "no token was found: log in with `hf auth login`" in res.output
    monkeypatch.setenv("HF_TOKEN", "wrong-" + TOKEN)
    res = runner.invoke(app, ["check", f"hf://{REPO}"])
    assert res.exit_code == 2 and TOKEN not in res.output and "401" in res.output
    assert "the Hub did not accept the token sent (from HF_TOKEN)" in res.output
    assert "gated" not in res.output


def test_hf_url_with_the_login_token_says_its_source(tmp_path, serve, monkeypatch):
    """`hf auth login` writes $HF_HOME/token: sent, and stderr says from where, not what."""
    from geodiag.io.sources import remote

    root = hf_layout(tmp_path)
    server = serve(root, "--prefix", f"/{REPO}/resolve/main", "--token", TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    home = tmp_path / "hf-login"
    monkeypatch.setenv("HF_HOME", str(home))
    home.mkdir()
    (home / "token").write_text(TOKEN + "\n")  # as huggingface_hub writes it
    monkeypatch.setattr(remote, "_SAID", set())
    res = runner.invoke(app, ["metrics", f"hf://{REPO}", "--json"])
    assert res.exit_code == 0, res.output
    assert _comparable(json.loads(res.stdout)) == _comparable(_metrics(str(root)))
    said = res.stderr.splitlines()
    assert said.count(f"hf://: sending the Hub token from {home / 'token'} (`hf auth login`)") == 1
    assert TOKEN not in res.output
    assert {r["status"] for r in server.requests()} <= {200, 206, 404}  # 404: files absent


def test_hf_gated_repository_is_told_from_a_wrong_token(tmp_path, serve, monkeypatch):
    """The Hub's answers (range_server --gated): 403 GatedRepo to a good token whose account
    has not accepted the conditions, 401 GatedRepo without one, 401 to a wrong token."""
    server = serve(
        hf_layout(tmp_path), "--prefix", f"/{REPO}/resolve/main", "--token", TOKEN, "--gated"
    )
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    page = f"{server.url}/{REPO}"

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    res = runner.invoke(app, ["check", f"hf://{REPO}"])
    assert res.exit_code == 2 and "refused (HTTP 403): a gated repository" in res.output
    assert f"accept the conditions on its page ({page})" in res.output
    assert "(from HF_TOKEN)" in res.output and TOKEN not in res.output

    monkeypatch.setenv("HF_TOKEN", "wrong-" + TOKEN)
    res = runner.invoke(app, ["check", f"hf://{REPO}"])
    assert res.exit_code == 2 and "refused (HTTP 401): the Hub did not accept the token" in (
        res.output
    )
    assert "gated" not in res.output and TOKEN not in res.output

    monkeypatch.delenv("HF_TOKEN")
    res = runner.invoke(app, ["check", f"hf://{REPO}"])
    assert res.exit_code == 2 and "refused (HTTP 401): a gated repository: log in" in res.output
    assert "hf auth login" in res.output


def test_missing_folder_is_exit_2_naming_the_url(tmp_path, serve):
    server = serve(tmp_path)
    res = runner.invoke(app, ["check", f"{server.url}/nothing-here"])
    assert res.exit_code == 2
    assert f"{server.url}/nothing-here" in res.output and "no model weights" in res.output
    out = " ".join(res.output.split())  # unwrapped
    # by URL: the formats read by byte ranges, not those fetched whole or recognised only
    assert "by URL geodiag reads GGUF, sharded safetensors, safetensors" in out, out
    assert "torch pickle" not in out and ".gguf or .safetensors by its own URL" in out, out


def test_server_errors_are_retried(tmp_path, serve, monkeypatch):
    monkeypatch.setattr(byte_ranges, "BACKOFF_S", 0.01)
    write_checkpoint(tmp_path / "ckpt", planted_new_rows("grounded", base_rows()))
    server = serve(tmp_path, "--fail-first", "2")
    assert _metrics(f"{server.url}/ckpt")["n_new_tokens"] == 24
    # The first request (HEAD config.json) failed twice, then was answered. Filtered by
    # file: the server logs each request after answering it, so a quick next request of the
    # client's can be logged before the one it followed.
    config = [r["status"] for r in server.requests() if r["path"].endswith("/config.json")]
    assert config[:3] == [500, 500, 200], config


def test_a_closed_port_fails_fast(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    res = runner.invoke(app, ["check", f"http://127.0.0.1:{port}/ckpt"])
    assert res.exit_code == 2 and "cannot connect" in res.output, res.output
    assert f"http://127.0.0.1:{port}/ckpt" in res.output
    assert time.monotonic() - start < 5


def test_coalesce_merges_nearby_spans():
    spans = [(0, 10), (10, 10), (100, 5), (10_000_000, 4)]
    assert byte_ranges.coalesce(spans, gap=1000) == [(0, 105), (10_000_000, 4)]


def test_a_long_read_says_its_progress(tmp_path, serve, monkeypatch):
    monkeypatch.setattr(byte_ranges, "PROGRESS_AFTER_S", 0.0)
    write_checkpoint(tmp_path / "ckpt", planted_new_rows("grounded", base_rows()))
    server = serve(tmp_path)
    said: list[str] = []
    url = f"{server.url}/ckpt/model.safetensors"
    f = byte_ranges.HttpFile(url, url, say=said.append)
    head, tail = f.read([(0, 8), (f.size() - 4, 4)])
    assert len(head) == 8 and len(tail) == 4
    assert said and said[0].startswith(f"reading {url}: ")


def test_a_weights_file_url(tmp_path, serve):
    ckpt = tmp_path / "ckpt"
    write_checkpoint(ckpt, planted_new_rows("grounded", base_rows()))
    server = serve(tmp_path)
    remote = _metrics(f"{server.url}/ckpt/model.safetensors")
    assert _comparable(remote) == _comparable(_metrics(str(ckpt / "model.safetensors")))


def test_report_and_drift_take_urls(tmp_path, serve):
    """`geodiag report hf://A hf://B --pair A=B` (here two https folders) pairs and renders
    them as it does the local folders; `drift` reads both sides by URL."""
    pytest.importorskip("matplotlib")
    write_checkpoint(tmp_path / "init", planted_new_rows("mean", base_rows()))
    write_checkpoint(tmp_path / "sft", planted_new_rows("grounded", base_rows()))
    server = serve(tmp_path)
    a, b = f"{server.url}/init", f"{server.url}/sft"
    html = tmp_path / "r.html"
    args = ["report", a, b, "--pair", f"{a}={b}", "-o", str(html), "--permutations", "0"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(html.with_suffix(".json").read_text(encoding="utf-8"))
    assert [e["report"]["path"] for e in doc["checkpoints"]] == [a, b]
    local = tmp_path / "local.html"
    res = runner.invoke(
        app,
        ["report", str(tmp_path / "init"), str(tmp_path / "sft"), "-o", str(local)]
        + ["--pair", f"{tmp_path / 'init'}={tmp_path / 'sft'}", "--permutations", "0"],
    )
    mine = json.loads(local.with_suffix(".json").read_text(encoding="utf-8"))
    # The same numbers and verdicts; the pair's reference named by its URL.
    assert doc["checkpoints"][1]["report"]["reference"] == a

    def numbers(report: dict) -> dict:  # less the notes and references, which name it
        out = {k: v for k, v in _comparable(report).items() if k not in ("notes", "reference")}
        for m in out["matrices"]:
            ((m.get("untrained") or {}).get("movement") or {}).pop("reference", None)
        return out

    assert [numbers(e["report"]) for e in doc["checkpoints"]] == [
        numbers(e["report"]) for e in mine["checkpoints"]
    ]
    res = runner.invoke(app, ["drift", a, b, "--json", "--permutations", "0"])
    there = runner.invoke(
        app,
        ["drift", str(tmp_path / "init"), str(tmp_path / "sft"), "--json"]
        + ["--permutations", "0"],
    )
    assert res.exit_code == there.exit_code == 0, res.output
    strip = lambda d: [{k: v for k, v in r.items() if k not in ("before", "after")} for r in d]  # noqa: E731
    assert strip(json.loads(res.stdout)) == strip(json.loads(there.stdout))


N_SAMPLED_BASE = 200_000  # ten times the sample: 25.6 MB of embedding at 32 dims


@pytest.fixture(scope="module")
def sampled_fixture(tmp_path_factory):
    """A folder whose vocabulary is ten times the sample, its new rows left at the mean
    (the gate fails them as untrained, by the spread-relative tolerance)."""
    root = tmp_path_factory.mktemp("sampled")
    big_checkpoint(root / "ckpt", n_base=N_SAMPLED_BASE, layer_rows=1024, kind="mean")
    return root


def _check(target: str, *flags: str) -> tuple[int, dict]:
    res = runner.invoke(app, ["check", target, "--json", *flags])
    return res.exit_code, json.loads(res.stdout)


def _statuses(doc: dict) -> list[tuple[str, str, str]]:
    return [(c["name"], c["matrix"], c["status"]) for c in doc["results"][0]["checks"]]


def test_a_remote_vocabulary_is_sampled_by_blocks_with_its_error(sampled_fixture, serve):
    from geodiag.analysis.checkpoint import measure_checkpoint
    from geodiag.analysis.options import AnalyzeOptions
    from geodiag.analysis.rows import vocabulary_sample_size

    root = sampled_fixture
    server = serve(root)
    url = f"{server.url}/ckpt"
    code_local, local = _check(str(root / "ckpt"))
    code, remote = _check(url)
    assert code == code_local == 1
    assert _statuses(remote) == _statuses(local)  # the verdict is the local one
    opts = AnalyzeOptions()
    # As many rows as the reference sample, at least 10 a block: 24 new rows read 200.
    n_sample, k = vocabulary_sample_size(24, opts), opts.vocabulary_sample_blocks
    assert n_sample == k * opts.vocabulary_block_min_rows == 200
    embedding = (N_SAMPLED_BASE + 24) * DIM * 4
    header = SafetensorsFile(root / "ckpt" / "model.safetensors")._data_start
    sent = server.bytes_sent("model.safetensors")
    # The header (with the first range read), the new rows, the sampled blocks, and at
    # most one coalescing gap per block: a fraction of the embedding.
    bound = header + 24 * DIM * 4 + n_sample * DIM * 4 + k * byte_ranges.COALESCE_GAP
    assert sent <= bound < 0.6 * embedding, (sent, bound, embedding)
    print(f"sampled: sent {sent} B of an embedding of {embedding} B ({sent / embedding:.1%})")

    report = measure_checkpoint(url)
    m = report.matrices[0]
    s = m.vocabulary_sample
    assert s.n_read == n_sample and len(s.blocks) == k and s.n_rows == N_SAMPLED_BASE
    assert any("sample of 200 of 200,000" in n for n in report.notes)
    assert any("outside the sample are unknown" in n for n in report.notes)
    # Against numpy on the full matrix: the exact spread lies within 3 SE of the sampled
    # one, and the SE is the between-block one (sd of per-block spreads / sqrt(K) x fpc).
    full = SafetensorsFile(root / "ckpt" / "model.safetensors").read(m.tensor).astype(np.float64)
    vocab = full[:N_SAMPLED_BASE]
    exact = np.sqrt(((vocab - vocab.mean(axis=0)) ** 2).sum(axis=1).mean())
    assert abs(s.spread - exact) <= 3 * s.spread_se, (s.spread, exact, s.spread_se)
    read = np.concatenate([vocab[a:b] for a, b in s.blocks])
    center = read.mean(axis=0)
    per_block = [np.sqrt(((vocab[a:b] - center) ** 2).sum(axis=1).mean()) for a, b in s.blocks]
    fpc = np.sqrt(1 - n_sample / N_SAMPLED_BASE)
    assert s.spread == pytest.approx(np.sqrt(((read - center) ** 2).sum(axis=1).mean()))
    assert s.spread_se == pytest.approx(np.std(per_block, ddof=1) / np.sqrt(k) * fpc, rel=1e-9)
    norms = [np.linalg.norm(vocab[a:b], axis=1).mean() for a, b in s.blocks]
    assert s.mean_norm_se == pytest.approx(np.std(norms, ddof=1) / np.sqrt(k) * fpc, rel=1e-9)
    # The reference rows are drawn from the rows read.
    ref_ids = np.concatenate([np.arange(a, b) for a, b in s.blocks])
    assert m.reference_size <= n_sample
    assert all(np.isin([n.id for t in m.neighbors for n in t.nearest], ref_ids))
    text = runner.invoke(app, ["check", url]).output
    assert "vocabulary: sampled 200 of 200,000 original rows (20 blocks, seed 0)" in text


def test_full_vocabulary_reads_every_row_as_locally(sampled_fixture, serve):
    root = sampled_fixture
    server = serve(root)
    url = f"{server.url}/ckpt"
    local = _metrics(str(root / "ckpt"))
    res = runner.invoke(app, ["metrics", url, "--json", "--full-vocabulary"])
    assert res.exit_code == 0, res.output
    remote = json.loads(res.stdout)
    assert remote["matrices"][0]["vocabulary_sample"] is None
    assert _comparable(remote) == _comparable(local)
    embedding = (N_SAMPLED_BASE + 24) * DIM * 4
    sent = server.bytes_sent("model.safetensors")
    assert embedding <= sent < 1.2 * embedding
    print(f"--full-vocabulary: sent {sent} B of an embedding of {embedding} B")


def test_the_vocabulary_sample_is_the_reference_sample():
    """Hand-computed: as many rows as the reference sample asks for, rounded up to whole
    blocks, at least 10 a block, at most vocabulary_sample_rows."""
    from geodiag.analysis.options import AnalyzeOptions
    from geodiag.analysis.rows import vocabulary_sample_size

    opts = AnalyzeOptions()
    assert vocabulary_sample_size(768, opts) == 780  # 39 rows in each of 20 blocks
    assert vocabulary_sample_size(24, opts) == 200  # the 10-row floor
    assert vocabulary_sample_size(20_000, opts) == 20_000
    assert vocabulary_sample_size(100_000, opts) == 20_000  # reference_cap and the ceiling
    assert vocabulary_sample_size(24, AnalyzeOptions(reference_size=1_000)) == 1_000
    assert vocabulary_sample_size(24, AnalyzeOptions(vocabulary_block_min_rows=1)) == 40


def test_a_relative_path_beside_a_url():
    """Hand-computed: within the repository, bucket or host the URL reaches, else None."""
    from geodiag.io.sources.remote import beside

    assert beside("hf://org/name/sft/random", "../../init/random") == "hf://org/name/init/random"
    assert beside("hf://org/name@v1/a", "../b") == "hf://org/name@v1/b"
    assert beside("hf://org/name", "../init") is None  # out of the repository
    assert beside("hf://org/name/sft", "..") == "hf://org/name"
    assert beside("https://h:8/runs/sft/x", "../../init") == "https://h:8/runs/init"
    assert beside("https://h/x", "../../init") is None
    assert beside("s3://bucket/run/sft", "../init") == "s3://bucket/run/init"
    assert beside("gs://bucket", "init") == "gs://bucket/init"
    assert beside("s3://bucket/run", "/home/me/init") is None  # a path on the writer's machine


def test_a_deepspeed_folder_behind_a_url_says_it_is_read_on_disk_only(tmp_path, serve):
    """DeepSpeed's rank files are found by listing, which a URL cannot give: its `latest`
    is recognized and the way out named, exit 2 in one line."""
    folder = tmp_path / "run"
    (folder / "global_step2").mkdir(parents=True)
    (folder / "latest").write_text("global_step2")
    (folder / "global_step2" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"x")
    server = serve(tmp_path)
    res = runner.invoke(app, ["check", f"{server.url}/run"])
    assert res.exit_code == 2
    assert f"{server.url}/run: a DeepSpeed ZeRO checkpoint" in res.output
    assert "zero_to_fp32.py" in res.output and len(res.output.strip().splitlines()) == 1
