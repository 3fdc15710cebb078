"""``gti probe`` end to end on a tiny mean-init checkpoint: the files it writes, the JSON's
fields, the table it prints, `geodiag report` showing the probe, and bad input (exit 2)."""

from __future__ import annotations

import json
import shutil

import pytest
import typer
from typer.testing import CliRunner

from geodiag.cli import app as geodiag_app
from gti.probe.cli import probe

runner = CliRunner()
app = typer.Typer()
app.command("probe")(probe)
app.command("noop")(lambda: None)

SHARE = {"hits", "n", "estimate", "low", "high", "level", "method"}


@pytest.fixture
def ckpt(mean_ckpt, tmp_path):
    """A copy: --write adds probe.json to the folder."""
    return shutil.copytree(mean_ckpt, tmp_path / "mean")


def test_writes_probe_json_and_prints_the_table(ckpt, tmp_path):
    out = tmp_path / "elsewhere" / "p.json"
    res = runner.invoke(
        app, ["probe", str(ckpt), "--write", "-o", str(out), "--n-resamples", "200"]
    )
    assert res.exit_code == 0, res.output
    assert (ckpt / "probe.json").read_text() == out.read_text()
    assert sorted(p.name for p in out.parent.iterdir()) == ["p.json"]  # no temporary left
    data = json.loads(out.read_text())
    assert data["format"] == "gti.probe" and data["format_version"] == 1
    assert (data["n_items"], data["n_index_items"], data["held_out"]) == (12, 12, False)
    for decoding in (data["model"], data["tie_break"]["decoding"]):
        assert set(decoding["exact_match"]) == SHARE
        assert [lv["level"] for lv in decoding["levels"]] == ["a", "b", "c"]
    assert data["most_frequent"]["answer"] == ["<a_0>", "<b_0>", "<c_0>"]
    lik = data["likelihood"]
    assert {"true_mean", "shuffled_mean", "difference", "p_value", "true_wins"} <= set(lik)
    assert lik["difference"]["n_resamples"] == 200 and set(lik["true_wins"]) == SHARE
    assert set(data["seconds"]) == {"decode", "likelihood", "total"}
    assert data["notes"] and "no held-out set" in data["notes"][0]
    lines = res.output.splitlines()
    assert lines[0] == f"gti probe {ckpt}"
    assert any(line.startswith("exact match") for line in lines)
    assert "tie-break (mean)" in res.output and "shuffled SIDs" in res.output
    assert max(len(line) for line in lines if str(ckpt) not in line) <= 80

    as_json = runner.invoke(app, ["probe", str(ckpt), "--json", "--n-resamples", "200"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["model"] == data["model"]


def test_geodiag_report_shows_the_probe(ckpt, tmp_path):
    assert (
        runner.invoke(app, ["probe", str(ckpt), "--write", "--n-resamples", "200"]).exit_code == 0
    )
    html = tmp_path / "r.html"
    res = runner.invoke(geodiag_app, ["report", str(ckpt), "-o", str(html), "--permutations", "20"])
    assert res.exit_code == 0, res.output
    page = html.read_text()
    assert 'id="probe"' in page and "tie-break (mean init)" in page
    probe_json = json.loads((ckpt / "probe.json").read_text())
    assert json.loads((tmp_path / "r.json").read_text())["checkpoints"][0]["probe"] == probe_json


def _index(tmp_path, token):
    """An LC-Rec-style index of 10 items whose level-a token is ``token`` % item, and their
    texts as JSON lines."""
    index = {f"m{i}": [token.format(i), f"<b_{i % 3}>", f"<c_{i % 2}>"] for i in range(10)}
    (tmp_path / "x.index.json").write_text(json.dumps(index))
    items = "".join(json.dumps({"item": f"m{i}", "text": f"Item {i}"}) + "\n" for i in range(10))
    (tmp_path / "items.jsonl").write_text(items)
    return tmp_path / "x.index.json", tmp_path / "items.jsonl"


@pytest.mark.parametrize(
    "args,says",
    [
        (["{tmp}/nope"], "not a checkpoint folder"),
        (["{ckpt}", "--sids", "{tmp}/x.index.json"], "--sids needs --items"),
        (["{ckpt}", "--sids", "{tmp}/gone.json", "--items", "{tmp}/items.jsonl"], "not found"),
        (["{ckpt}", "--sample", "1"], "--sample"),
    ],
)
def test_bad_input_exits_2(ckpt, tmp_path, args, says):
    _index(tmp_path, "<a_{}>")
    argv = [a.format(tmp=tmp_path, ckpt=ckpt) for a in args]
    res = runner.invoke(app, ["probe", *argv])
    assert res.exit_code == 2 and says in res.output, res.output


def test_an_index_of_other_tokens_exits_2(ckpt, tmp_path):
    sids, items = _index(tmp_path, "<a_{}0>")  # <a_10> ... : codes this checkpoint lacks
    res = runner.invoke(app, ["probe", str(ckpt), "--sids", str(sids), "--items", str(items)])
    assert res.exit_code == 2, res.output
    assert "tokens are not tokens of" in res.output and "<a_10>" in res.output


def test_another_frameworks_index_is_read(ckpt, tmp_path):
    sids, items = _index(tmp_path, "<a_{}>")  # only <a_0>..<a_3> exist: keep 4 items
    index = {k: v for k, v in json.loads(sids.read_text()).items() if int(k[1:]) < 4}
    sids.write_text(json.dumps(index))
    res = runner.invoke(
        app, ["probe", str(ckpt), "--sids", str(sids), "--items", str(items), "--json"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["n_items"] == 4 and data["index"] == str(sids)
