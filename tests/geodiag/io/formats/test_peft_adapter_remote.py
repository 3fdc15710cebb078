"""PEFT adapter folders read by URL (geodiag.io.sources.remote -> geodiag.io.formats.peft_adapter), against
range_server.py: adapter_config.json fetched, adapter_model.safetensors by ranges, the base
local or by URL; the verdict and the metrics are the local folder's."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from tests.geodiag.io.sources.test_remote import _comparable, serve  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore")  # PEFT's and transformers' own advice
peft = pytest.importorskip("peft")
pytest.importorskip("transformers")
from tests.geodiag.io.formats.test_peft_adapter import NEW, _adapter, _write_base  # noqa: E402

runner = CliRunner()
REPO = "org/tiny-sid-lora"


@pytest.fixture
def adapter_tree(tmp_path):
    """``tmp_path/base`` (resized, tied) and ``tmp_path/tt`` (LoRA on q_proj with trainable
    tokens), the adapter's base_model_name_or_path the base's local path."""
    base = _write_base(tmp_path, tied=True, resized=True)
    shutil.move(base, tmp_path / "base")
    cfg = peft.LoraConfig(r=4, target_modules=["q_proj"], trainable_token_indices=NEW)
    folder, _ = _adapter(tmp_path, tmp_path / "base", cfg, "tt")
    return tmp_path / "base", folder


def _json(*args: str) -> tuple[int, dict]:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.stdout)


def _numbers(doc: dict) -> dict:
    """Less where the adapter, its base and its before (the reference) were read from."""
    out = _comparable(doc)
    for d in [out, *out.get("results", [])]:
        if "adapter" in d:
            d["adapter"] = {
                k: v for k, v in d["adapter"].items() if k not in ("adapter", "base", "base_from")
            }
        d.pop("store", None)
        d.pop("reference", None)
        for m in d.get("matrices", []):
            if (m.get("untrained") or {}).get("movement"):
                m["untrained"]["movement"].pop("reference")
    return out


def test_remote_adapter_over_its_local_base(adapter_tree, serve):  # noqa: F811
    base, folder = adapter_tree
    server = serve(folder.parent)
    url = f"{server.url}/tt"
    code, remote = _json("metrics", url)
    local_code, local = _json("metrics", str(folder))
    assert code == local_code == 0
    assert remote["new_token_source"] == "adapter" and remote["adapter"]["base"] == str(base)
    assert remote["adapter"]["adapter"] == url
    assert _numbers(remote) == _numbers(local)
    code, remote = _json("check", url, "--permutations", "10")
    local_code, local = _json("check", str(folder), "--permutations", "10")
    assert code == local_code and _numbers(remote) == _numbers(local)
    # The adapter's weights by ranges only; the base was local, so nothing else asked for.
    weights = [r for r in server.requests() if r["path"].endswith("model.safetensors")]
    assert weights and all(r["path"] == "/tt/adapter_model.safetensors" for r in weights)
    assert all(r["range"] for r in weights if r["method"] == "GET")


def test_remote_adapter_over_a_base_by_url(adapter_tree, serve, tmp_path):  # noqa: F811
    base, folder = adapter_tree
    server = serve(tmp_path)
    local_code, local = _json("metrics", str(folder))
    # --base URL, and base_model_name_or_path a URL: both read by ranges.
    code, by_flag = _json("metrics", f"{server.url}/tt", "--base", f"{server.url}/base")
    assert by_flag["adapter"]["base"] == f"{server.url}/base"
    assert by_flag["adapter"]["base_from"] == "--base"
    assert code == local_code and _numbers(by_flag) == _numbers(local)
    cfg_path = folder / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = f"{server.url}/base"
    cfg_path.write_text(json.dumps(cfg))
    code, by_config = _json("metrics", f"{server.url}/tt")
    assert by_config["adapter"]["base_from"] == "adapter_config.json"
    assert code == local_code and _numbers(by_config) == _numbers(local)
    # A local adapter reads its base by URL the same way.
    code, here = _json("metrics", str(folder))
    assert code == local_code and _numbers(here) == _numbers(local)
    base_reads = [r for r in server.requests() if r["path"] == "/base/model.safetensors"]
    assert base_reads and all(r["range"] for r in base_reads if r["method"] == "GET")


def test_remote_adapter_with_a_hub_id_base_names_the_field_and_flag(adapter_tree, serve):  # noqa: F811
    base, folder = adapter_tree
    cfg_path = folder / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = "HuggingFaceTB/SmolLM2-135M"
    cfg_path.write_text(json.dumps(cfg))
    server = serve(folder.parent)
    url = f"{server.url}/tt"
    res = runner.invoke(app, ["metrics", url])
    assert res.exit_code == 2, res.output
    line = res.output.strip().splitlines()[-1]
    assert line.startswith(f"error: {url}/adapter_config.json: "), line
    assert "base_model_name_or_path" in line and "--base hf://HuggingFaceTB/SmolLM2-135M" in line
    assert runner.invoke(app, ["metrics", url, "--base", str(base)]).exit_code == 0


def test_remote_adapter_without_safetensors_weights_exits_2(adapter_tree, serve):  # noqa: F811
    _, folder = adapter_tree
    (folder / "adapter_model.safetensors").rename(folder / "adapter_model.bin")
    server = serve(folder.parent)
    res = runner.invoke(app, ["metrics", f"{server.url}/tt"])
    assert res.exit_code == 2 and f"{server.url}/tt" in res.output, res.output
    assert "adapter_model.bin, a pickle read only locally" in res.output


def test_hf_adapter_folder(adapter_tree, serve, monkeypatch):  # noqa: F811
    _, folder = adapter_tree
    server = serve(folder, "--prefix", f"/{REPO}/resolve/main")
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    _, local = _json("metrics", str(folder))
    _, remote = _json("metrics", f"hf://{REPO}")
    assert remote["path"] == f"hf://{REPO}" and _numbers(remote) == _numbers(local)
