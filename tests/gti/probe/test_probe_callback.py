"""ProbeCallback inside real transformers.Trainer runs on the tiny world's mean-init model
(CPU, a few steps): the scalars it logs equal the probe of the checkpoint the Trainer saved,
reloaded from disk; probe.json lands in checkpoint-N and `geodiag report` shows it; planted
rows score above the tie-break baseline and mean rows exactly on it; only rank 0 probes, and the
model's train/eval mode is kept."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import transformers
from planted_rows import plant
from typer.testing import CliRunner

from geodiag.cli import app as geodiag_app
from geodiag.jsonio import dumps
from gti.probe.callback import ProbeCallback, probe_logs
from gti.probe.config import ProbeConfig
from gti.probe.measure import probe_model
from gti.probe.source import resolve_source

RESAMPLES = 200


class Sequences(torch.utils.data.Dataset):
    """Seeded random token sequences over the whole vocabulary (new rows included)."""

    def __init__(self, vocab: int, n: int = 16):
        self.vocab, self.n = vocab, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.randint(0, self.vocab, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": x, "labels": x}


class Recorder(transformers.TrainerCallback):
    """Stands in for a report_to integration (it runs before ProbeCallback)."""

    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append({**logs, "_step": state.global_step})


def _load(ckpt):
    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True)
    return model, transformers.AutoTokenizer.from_pretrained(ckpt, local_files_only=True)


def train(tmp_path, ckpt, model, *, steps=4, every=2, lr=1e-2, evaluate=True):
    """A Trainer run on ``model`` with a ProbeCallback of ``ckpt``'s SIDs attached after a
    recorder; evaluation and saving every ``every`` steps."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(ckpt, local_files_only=True)
    data = Sequences(len(tokenizer))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=steps,
        per_device_train_batch_size=4,
        learning_rate=lr,
        save_strategy="steps",
        save_steps=every,
        eval_strategy="steps" if evaluate else "no",
        eval_steps=every,
        logging_steps=100,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    recorder = Recorder()
    trainer = transformers.Trainer(
        model=model,
        args=args,
        train_dataset=data,
        eval_dataset=data if evaluate else None,
        processing_class=tokenizer,
        callbacks=[recorder],
    )
    callback = ProbeCallback(ProbeConfig(checkpoint=ckpt, n_resamples=RESAMPLES)).attach(trainer)
    trainer.train()
    return trainer, callback, recorder


def _probe_entries(trainer) -> list[dict]:
    return [e for e in trainer.state.log_history if "probe/exact_match" in e]


def _figures(result) -> dict:
    """The result's JSON without what differs between two runs of the same probe."""
    data = json.loads(dumps(result))
    del data["seconds"], data["checkpoint"]
    return data


def test_logs_equal_the_probe_of_the_saved_checkpoint(mean_ckpt, tmp_path):
    model, _ = _load(mean_ckpt)
    trainer, callback, recorder = train(tmp_path, mean_ckpt, model)
    entries = _probe_entries(trainer)
    assert [e["step"] for e in entries] == [2, 4]  # evaluate and save share one probe a step
    seen = [r for r in recorder.logs if "probe/exact_match" in r]
    assert [r["_step"] for r in seen] == [2, 4]  # an integration before it records them
    src = resolve_source(ProbeConfig(checkpoint=mean_ckpt))
    for entry in entries:
        folder = tmp_path / "run" / f"checkpoint-{entry['step']}"
        saved, tok = _load(folder)  # the other route: the weights as saved, reloaded
        expected = probe_model(saved, tok, src, n_resamples=RESAMPLES)
        logged = {k: v for k, v in entry.items() if k.startswith("probe/")}
        want = probe_logs(expected)
        assert logged.keys() == want.keys()
        assert {k: v for k, v in logged.items() if k != "probe/seconds"} == {
            k: v for k, v in want.items() if k != "probe/seconds"
        }
        written = json.loads((folder / "probe.json").read_text())
        assert written["checkpoint"] == str(folder)
        assert {k: v for k, v in written.items() if k not in ("seconds", "checkpoint")} == (
            _figures(expected)
        )
    # the rows moved between the two saves, so the likelihoods did too: not one result twice
    assert entries[0]["probe/loglik_own_sid"] != entries[1]["probe/loglik_own_sid"]

    html = tmp_path / "r.html"
    folder = tmp_path / "run" / "checkpoint-4"
    res = CliRunner().invoke(
        geodiag_app, ["report", str(folder), "-o", str(html), "--permutations", "20"]
    )
    assert res.exit_code == 0, res.output
    assert 'id="probe"' in html.read_text()
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["checkpoints"][0]["probe"] == json.loads((folder / "probe.json").read_text())


def test_planted_rows_beat_the_tie_break_and_mean_rows_equal_it(mean_ckpt, tmp_path):
    """lr 0: the rows stay as given, planted (each item's SID decodable from its text) or
    at the mean (every new row identical)."""
    planted, tok = _load(mean_ckpt)
    plant(planted.eval(), tok, resolve_source(ProbeConfig(checkpoint=mean_ckpt)))
    mean, _ = _load(mean_ckpt)
    logs = {}
    for name, model in (("planted", planted), ("mean", mean)):
        trainer, *_ = train(tmp_path / name, mean_ckpt, model, steps=2, lr=0.0, evaluate=False)
        (logs[name],) = _probe_entries(trainer)
    p, m = logs["planted"], logs["mean"]
    assert p["probe/exact_match"] == 1.0 > p["probe/tie_break/exact_match"]
    for level in "abc":
        assert p[f"probe/accuracy_{level}"] > p[f"probe/tie_break/accuracy_{level}"]
        assert m[f"probe/accuracy_{level}"] == m[f"probe/tie_break/accuracy_{level}"]
    assert m["probe/exact_match"] == m["probe/tie_break/exact_match"]
    assert m["probe/loglik_difference"] == 0.0


def test_only_the_main_process_probes(mean_ckpt, tmp_path):
    model, _ = _load(mean_ckpt)
    callback = ProbeCallback(ProbeConfig(checkpoint=mean_ckpt), when=("save",))
    (tmp_path / "checkpoint-3").mkdir()
    args = SimpleNamespace(output_dir=str(tmp_path), report_to=[])
    state = SimpleNamespace(global_step=3, is_world_process_zero=False, log_history=[])
    callback.on_save(args, state, None, model=model)
    assert callback.last_result is None and state.log_history == []
    assert not (tmp_path / "checkpoint-3" / "probe.json").exists()
    state.is_world_process_zero = True
    callback.on_evaluate(args, state, None, model=model)  # not asked for at evaluations
    assert callback.last_result is None
    model.train()
    callback.on_save(args, state, None, model=model)
    assert model.training  # the probe (eval mode) put it back as it found it
    assert (tmp_path / "checkpoint-3" / "probe.json").is_file()
    assert [e["step"] for e in state.log_history] == [3]  # not attached: the history only


def test_when_names_the_hooks():
    with pytest.raises(ValueError, match="when: choose from evaluate, save"):
        ProbeCallback(ProbeConfig(checkpoint="x"), when=("eval",))
