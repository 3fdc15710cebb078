"""GeodiagCallback inside real transformers.Trainer runs on a tiny Llama (CPU, a few steps).

Asserted: the logged keys (in state.log_history and as seen by a reporting callback
that runs before it, as TensorBoard/W&B do), the JSONL records and their schema, the
save-time gate on each checkpoint, the collapse warning and the stop option, a PEFT
model, the non-main process of a DDP run, and a ZeRO-3 parameter without deepspeed.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from trainer_distributed_run import BOOKS, DIM, LEVELS, VOCAB, mean_init_model  # noqa: E402

import geodiag  # noqa: E402
from geodiag.callback import GeodiagCallback  # noqa: E402
from geodiag.gate.checks import GateConfig  # noqa: E402
from geodiag.gate.trajectory import read_records, truncate_after  # noqa: E402

NEW = [i for ids in LEVELS.values() for i in ids]


class Sequences(torch.utils.data.Dataset):
    """Sequences that use the new tokens, so their rows get gradients."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.cat(
            [torch.randint(0, 100, (4,), generator=g), torch.randint(100, VOCAB, (4,), generator=g)]
        )
        return {"input_ids": x, "labels": x}


class Recorder(transformers.TrainerCallback):
    """Stands in for a report_to integration: records every log event it is shown."""

    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append({**logs, "_step": state.global_step})


def training_args(tmp_path, **changes) -> transformers.TrainingArguments:
    """The tests' Trainer settings: CPU, seeded, batches of 4, no reporting, 1e-2."""
    settings = dict(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        logging_steps=100,
        learning_rate=1e-2,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    return transformers.TrainingArguments(**{**settings, **changes})


def train(tmp_path, callback, *, lr=1e-2, steps=6, save_steps=3, model=None, attach=True):
    args = training_args(
        tmp_path, max_steps=steps, save_steps=save_steps, save_strategy="steps", learning_rate=lr
    )
    recorder = Recorder()
    trainer = transformers.Trainer(
        model=model or mean_init_model(),
        args=args,
        train_dataset=Sequences(),
        callbacks=[recorder, callback],
    )
    if attach:
        callback.attach(trainer)
    trainer.train()
    return trainer, recorder


def test_logs_jsonl_and_save_time_gate(tmp_path):
    cb = GeodiagCallback(levels=LEVELS, codebooks=BOOKS, every_n_steps=2, rsa_sample=10)
    trainer, recorder = train(tmp_path, cb)
    keys = {
        "geodiag/effective_rank_ratio",
        "geodiag/spread_relative",
        "geodiag/mean_pairwise_cosine",
        "geodiag/rsa_a",
        "geodiag/collapsed",
    }
    history = {h["step"]: h for h in trainer.state.log_history if "geodiag/spread_relative" in h}
    assert sorted(history) == [2, 4, 6] and all(keys <= set(h) for h in history.values())
    assert all("loss" in h for h in history.values())  # one event with the loss, same step
    # A reporting callback listed before ours sees the same numbers at the same steps.
    seen = {r["_step"]: r for r in recorder.logs if "geodiag/spread_relative" in r}
    assert {s: {k: seen[s][k] for k in keys} for s in seen} == {
        s: {k: history[s][k] for k in keys} for s in history
    }
    gates = [h for h in trainer.state.log_history if "geodiag/gate_passed" in h]
    assert [(h["step"], h["geodiag/gate_passed"]) for h in gates] == [(3, 1.0), (6, 1.0)]

    out = tmp_path / "run"
    records, notes = read_records(out / "geodiag_trajectory.jsonl")
    assert notes == []
    assert [(r["step"], r["kind"]) for r in records] == [
        (0, "snapshot"),
        (2, "snapshot"),
        (3, "gate"),
        (4, "snapshot"),
        (6, "snapshot"),
        (6, "gate"),
    ]
    for r in records:
        assert set(r) >= {"step", "elapsed_s", "structure"}
        s = r["structure"]
        assert set(s) >= {
            "effective_rank_ratio",
            "spread_relative",
            "mean_pairwise_cosine",
            "rsa",
            "rsa_p",
        }
    assert records[0]["structure"]["effective_rank_ratio"] == 0.0  # the mean init, step 0
    assert records[0]["collapsed"] is True
    start = records[0]["structure"]  # the mean init: one group of 20 identical rows
    assert (start["identical_rows"], start["n_untrained"], start["n_unmoved"]) == (
        20,
        20,
        None,
    )
    # Tied head: every row moved, but the rows not drawn yet moved alike (same logits, same
    # softmax gradient), so they are still one group of identical rows.
    step2 = records[1]["structure"]
    assert step2["n_unmoved"] == 0 and step2["n_untrained"] == step2["identical_rows"]
    assert set(records[1]["structure"]["rsa"]) == {"a"}  # the snapshot: first level only
    assert set(records[2]["structure"]["rsa"]) == {"a", "b"}  # the gate: every level
    elapsed = [r["elapsed_s"] for r in records]
    assert elapsed == sorted(elapsed)

    # The gate read checkpoint-6 from disk; the last snapshot measured the same weights in
    # memory: same rows, SVD vs Gram eigenvalues (agree to ~1e-12 relative here).
    snap, gate = records[4]["structure"], records[5]["structure"]
    for key in ("effective_rank_ratio", "spread_relative", "mean_pairwise_cosine"):
        assert snap[key] == pytest.approx(gate[key], rel=1e-9)
    check = json.loads((out / "checkpoint-3" / "geodiag_check.json").read_text())
    assert check["passed"] is True and check["measured"].endswith("checkpoint-3")
    assert {c["name"] for c in check["result"]["checks"]} >= {"spread_relative", "rsa[a]", "rsa[b]"}
    # ... and equals what geodiag.check says on that folder
    assert geodiag.check(out / "checkpoint-6", levels=LEVELS, codebooks=BOOKS).passed

    # Each checkpoint describes itself (sidecar + codebooks): no flags needed afterwards.
    from geodiag.io.vocabulary import sidecar
    from geodiag.outputs.report import ReportOptions, write_report

    side = sidecar.load(out / "checkpoint-3")
    assert [(lv.name, lv.token_ids) for lv in side.levels] == list(LEVELS.items())
    assert side.provenance["step"] == 3 and side.base_vocab_size == 100
    bare = geodiag.measure(out / "checkpoint-6", n_permutations=50, neighbors=0)
    assert [lv.name for lv in bare.matrices[0].levels] == ["a", "b"]
    assert all(lv.rsa is not None for lv in bare.matrices[0].levels)
    files = write_report(
        sorted(out.glob("checkpoint-*")) + [out / "geodiag_trajectory.jsonl"],
        tmp_path / "r.html",
        opts=ReportOptions(n_permutations=20),
    )
    trajs = json.loads(files.json.read_text())["trajectories"]
    assert [(t["label"], t["steps"]) for t in trajs] == [
        ("run/geodiag_trajectory.jsonl", [0, 2, 4, 6]),
        ("run (checkpoints)", [3, 6]),
    ]
    assert set(trajs[1]["rsa"]) == {"a", "b"}


def test_stop_when_still_collapsed(tmp_path, caplog):
    cb = GeodiagCallback(
        new_token_ids=NEW,
        every_n_steps=2,
        collapse_after_steps=3,
        on_collapse="stop",
        gate_on_save=False,
    )
    with caplog.at_level(logging.WARNING, logger="geodiag.callback"):
        trainer, _ = train(tmp_path, cb, lr=0.0, steps=10, save_steps=100)
    # lr 0: the rows stay the mean. Step 2 is before K = 3; step 4 is the first check.
    assert trainer.state.global_step == 4
    assert "still collapsed at step 4" in caplog.text and "stopping training" in caplog.text
    last = [h for h in trainer.state.log_history if "geodiag/collapsed" in h][-1]
    assert last["geodiag/collapsed"] == 1.0 and last["step"] == 4


def test_warn_once_and_keep_training(tmp_path, caplog):
    cb = GeodiagCallback(
        new_token_ids=NEW, every_n_steps=1, collapse_after_steps=1, gate_on_save=False
    )
    with caplog.at_level(logging.WARNING, logger="geodiag.callback"):
        trainer, _ = train(tmp_path, cb, lr=0.0, steps=3, save_steps=100, attach=False)
    assert trainer.state.global_step == 3
    assert caplog.text.count("still collapsed") == 1
    # Not attached: the numbers still reach state.log_history and the JSONL.
    assert sum("geodiag/mean_pairwise_cosine" in h for h in trainer.state.log_history) == 3


def test_peft_model_is_measured_through_its_modules(tmp_path):
    peft = pytest.importorskip("peft")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = peft.get_peft_model(
            mean_init_model(),
            peft.LoraConfig(
                r=2, target_modules=["q_proj"], trainable_token_indices={"embed_tokens": NEW}
            ),
        )
    cb = GeodiagCallback(new_token_ids=NEW, every_n_steps=3)
    trainer, _ = train(tmp_path, cb, model=model, steps=3, save_steps=3)
    records, _ = read_records(tmp_path / "run" / "geodiag_trajectory.jsonl")
    assert [(r["step"], r["kind"]) for r in records] == [
        (0, "snapshot"),
        (3, "snapshot"),
        (3, "gate"),
    ]
    assert records[0]["structure"]["spread_relative"] == 0.0
    assert records[1]["structure"]["spread_relative"] > 0.0  # the trainable tokens moved
    assert records[1]["structure"]["n_untrained"] == 0
    assert records[1]["structure"]["grad_norm"] > 0.0  # read off the trainable tokens' delta
    # An adapter folder is not a model: the gate measured the model in memory.
    assert records[2]["gate"]["measured"] == "model in memory"
    now = geodiag.measure(trainer.model, new_ids=NEW, neighbors=0).matrices[0].new
    assert records[1]["structure"]["spread_relative"] == pytest.approx(
        now.spread_relative, rel=1e-12
    )


def _state(step, main=True, max_steps=10):
    return transformers.TrainerState(
        global_step=step, max_steps=max_steps, is_world_process_zero=main
    )


def test_only_the_main_process_measures_and_writes(tmp_path):
    args = SimpleNamespace(output_dir=str(tmp_path), report_to=[])
    model = mean_init_model()
    cb = GeodiagCallback(new_token_ids=NEW, every_n_steps=2, collapse_after_steps=0)
    control = transformers.TrainerControl()
    cb.on_train_begin(args, _state(0, main=False), control, model=model)
    cb.on_step_end(args, _state(2, main=False), control, model=model)
    assert not (tmp_path / "geodiag_trajectory.jsonl").exists()
    assert not control.should_log and not control.should_training_stop
    # With the stop option every rank measures (same weights, same decision), none writes.
    stop = GeodiagCallback(
        new_token_ids=NEW, every_n_steps=2, collapse_after_steps=0, on_collapse="stop"
    )
    stop.on_step_end(args, _state(2, main=False), control, model=model)
    assert control.should_training_stop and not control.should_log
    assert not (tmp_path / "geodiag_trajectory.jsonl").exists()


def test_zero3_partitioned_without_deepspeed_skips_with_a_warning(tmp_path, caplog, monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # absent, even where it is installed
    model = mean_init_model()
    model.get_input_embeddings().weight.ds_id = 7  # what ZeRO-3 puts on its partitioned params
    args = SimpleNamespace(output_dir=str(tmp_path), report_to=[])
    cb = GeodiagCallback(new_token_ids=NEW, every_n_steps=1)
    with caplog.at_level(logging.WARNING, logger="geodiag.callback"):
        cb.on_step_end(args, _state(1), transformers.TrainerControl(), model=model)
    assert "deepspeed cannot be imported" in caplog.text
    line = json.loads((tmp_path / "geodiag_trajectory.jsonl").read_text())
    assert line["kind"] == "skipped" and line["structure"]["spread_relative"] is None


def test_resume_drops_records_past_the_checkpoint(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [{"step": s, "elapsed_s": float(s), "structure": {}} for s in (0, 2, 4, 6)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 8, "elap')
    assert truncate_after(path, 4) == 4.0
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [0, 2, 4]


def test_bad_arguments():
    with pytest.raises(ValueError, match="new_token_ids"):
        GeodiagCallback()
    with pytest.raises(ValueError, match="every_n_steps"):
        GeodiagCallback(NEW, every_n_steps=0)
    with pytest.raises(ValueError, match="on_collapse"):
        GeodiagCallback(NEW, on_collapse="explode")


def test_untied_head_is_its_own_matrix(tmp_path):
    model = mean_init_model(tie=False)  # the head keeps its own (random) new rows
    args = SimpleNamespace(output_dir=str(tmp_path), report_to=[])
    cb = GeodiagCallback(new_token_ids=NEW, every_n_steps=1)
    control = transformers.TrainerControl()
    cb.on_step_end(args, _state(1), control, model=model)
    line = json.loads((tmp_path / "geodiag_trajectory.jsonl").read_text())
    assert line["structure"]["spread_relative"] == 0.0  # input: the mean
    assert line["structure_output"]["spread_relative"] > 0.5  # head: untouched random rows
    logs = {}
    cb.on_log(args, _state(1), control, logs=logs)
    assert logs["geodiag/spread_relative"] == 0.0
    assert logs["geodiag/output/spread_relative"] == line["structure_output"]["spread_relative"]
    assert control.should_log


def test_zero3_every_rank_joins_the_gather(tmp_path, monkeypatch):
    """With deepspeed present, each rank enters GatheredParameters (a collective) at each
    snapshot; only the main process measures and writes. A stand-in records the calls."""
    import contextlib
    import sys
    import types

    entered = []

    @contextlib.contextmanager
    def gathered_parameters(params, modifier_rank=None):
        entered.append((len(params), modifier_rank))
        yield

    fake = types.ModuleType("deepspeed")
    fake.zero = types.SimpleNamespace(GatheredParameters=gathered_parameters)
    monkeypatch.setitem(sys.modules, "deepspeed", fake)
    model = mean_init_model()
    model.get_input_embeddings().weight.ds_id = 7
    cb = GeodiagCallback(new_token_ids=NEW, every_n_steps=1)
    control = transformers.TrainerControl()
    for rank, main in ((1, False), (0, True)):
        out = tmp_path / f"rank{rank}"
        cb.on_step_end(
            SimpleNamespace(output_dir=str(out), report_to=[]),
            _state(1, main=main),
            control,
            model=model,
        )
    assert entered == [(1, None), (1, None)]  # the tied embedding: one parameter, all ranks
    assert not (tmp_path / "rank1").exists()
    assert json.loads((tmp_path / "rank0" / "geodiag_trajectory.jsonl").read_text())["step"] == 1


def test_numbers_reach_tensorboard(tmp_path, monkeypatch):
    """report_to=["tensorboard"]: the real TensorBoardCallback, placed before ours by the
    Trainer; attach() puts ours first, and the event files hold geodiag/* per step."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    cb = GeodiagCallback(new_token_ids=NEW, every_n_steps=2, gate_on_save=False)
    args = training_args(tmp_path, max_steps=4, save_strategy="no", report_to=["tensorboard"])
    trainer = transformers.Trainer(
        model=mean_init_model(), args=args, train_dataset=Sequences(), callbacks=[cb]
    )
    names = [type(c).__name__ for c in trainer.callback_handler.callbacks]
    assert names.index("TensorBoardCallback") < names.index("GeodiagCallback")
    cb.attach(trainer)
    assert trainer.callback_handler.callbacks[0] is cb
    trainer.train()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = events.Tags()["scalars"]
    # transformers' TensorBoardCallback rewrites the train keys as train/<name>
    tag = next(t for t in tags if t.endswith("geodiag/spread_relative"))
    points = [(e.step, e.value) for e in events.Scalars(tag)]
    history = [
        (h["step"], h["geodiag/spread_relative"])
        for h in trainer.state.log_history
        if "geodiag/spread_relative" in h
    ]
    assert [s for s, _ in points] == [2, 4]
    # TensorBoard stores float32: the logged float64 rounded to 24 significand bits.
    assert [v for _, v in points] == pytest.approx([v for _, v in history], rel=1e-7)


class FirstLevelOnly(torch.utils.data.Dataset):
    """Sequences that use only level a's tokens: with an untied head, level b's input rows
    get no gradient and never move."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.cat(
            [torch.randint(0, 100, (4,), generator=g), torch.randint(100, 110, (4,), generator=g)]
        )
        return {"input_ids": x, "labels": x}


class GradRecorder(transformers.TrainerCallback):
    """The reference: the new rows' gradient norm and the rows, read with torch directly."""

    def __init__(self):
        self.grad, self.rows = {}, {}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.rows[0] = model.get_input_embeddings().weight.detach().double().clone()

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        g = model.get_input_embeddings().weight.grad[NEW]
        self.grad[state.global_step + 1] = float(g.double().norm())


def test_untrained_alarm_names_the_tokens_and_stops(tmp_path, caplog):
    """A real Trainer run: level b's rows never move, so from step K the alarm names them
    and stops (the rule at 0: every untrained token counts, used or not); movement, the
    unmoved fraction per level and the gradient norm are recorded."""
    model = mean_init_model(tie=False)
    with torch.no_grad():  # new rows distinct (no identical group): only movement flags
        w = model.get_input_embeddings().weight
        w[100:] = torch.randn(20, DIM, generator=torch.Generator().manual_seed(1)) * 0.02
    cb = GeodiagCallback(
        levels=LEVELS,
        every_n_steps=2,
        untrained_after_steps=3,
        on_untrained="stop",
        gate_on_save=False,
        gate=GateConfig(untrained_uses_to_fail=0),
    )
    ref = GradRecorder()
    args = training_args(tmp_path, max_steps=10, save_strategy="no")
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=FirstLevelOnly(), callbacks=[ref, cb]
    )
    with caplog.at_level(logging.WARNING, logger="geodiag.callback"):
        trainer.train()
    assert trainer.state.global_step == 4  # step 2 is before K = 3; step 4 stops
    b_names = [f"<b_{i}>" for i in range(10)]  # names from the levels (no tokenizer)
    assert "10 of 20 new tokens are untrained after 4 steps" in caplog.text
    assert "10 not moved since the first snapshot" in caplog.text
    assert ", ".join(b_names) in caplog.text and "stopping training" in caplog.text
    assert cb.last_untrained == b_names

    records, _ = read_records(tmp_path / "run" / "geodiag_trajectory.jsonl")
    assert [r["step"] for r in records] == [0, 2, 4]
    first, *later = [r["structure"] for r in records]
    # The first snapshot: nothing could move yet; no identical rows.
    assert (first["n_unmoved"], first["movement"], first["n_untrained"]) == (None, None, 0)
    assert first["identical_rows"] == 0 and records[0]["collapsed"] is False
    # By step 2 a few of a's tokens have not been drawn yet (Adam leaves a row without
    # gradient where it is); by step 4 all have.
    assert later[0]["unmoved_by_level"]["b"] == 1.0 and later[0]["n_unmoved"] > 10
    last = later[-1]
    assert last["n_unmoved"] == 10 and last["unmoved_fraction"] == 0.5
    assert last["unmoved_by_level"] == {"a": 0.0, "b": 1.0}
    assert last["n_untrained"] == 10 and last["identical_rows"] == 0
    # max_untrained_tokens (0) is one of the collapse checks the callback tests.
    assert [r["collapsed"] for r in records] == [False, True, True]
    # The gradient norm equals torch's on the same .grad; movement equals torch's on the
    # rows, over the vocabulary's spread at the first snapshot (the callback fixes it then).
    assert [s["grad_norm"] for s in later] == pytest.approx([ref.grad[2], ref.grad[4]], rel=1e-12)
    assert first["grad_norm"] is None
    w0 = ref.rows[0]
    w = trainer.model.get_input_embeddings().weight.detach().double()
    moved = (w[NEW] - w0[NEW]).norm(dim=1)  # (20,)
    assert (moved[10:] == 0).all() and (moved[:10] > 0).all()
    spread = (w0[:100] - w0[:100].mean(0)).pow(2).sum(1).mean().sqrt()
    # The callback's spread sums each float32 row's DIM squares in float32
    # (VocabularyAccumulator: no float64 copy), relative error up to ~DIM * 2^-24; the
    # order of that sum follows the CPU's vector width, so no tighter bound holds.
    want = float(moved.pow(2).mean().sqrt() / spread)
    assert last["movement"] == pytest.approx(want, rel=DIM * 2**-24)
    logged = [h for h in trainer.state.log_history if "geodiag/n_untrained" in h]
    assert [(h["step"], h["geodiag/n_untrained"]) for h in logged] == [
        (2, later[0]["n_unmoved"]),
        (4, 10.0),
    ]
    assert all(h["geodiag/grad_norm"] > 0 for h in logged)


def _distinct_new_rows(model):
    with torch.no_grad():
        w = model.get_input_embeddings().weight
        w[100:] = torch.randn(20, DIM, generator=torch.Generator().manual_seed(1)) * 0.02
    return model


def test_the_untrained_alarm_names_what_the_data_feeds_not_what_it_never_does(tmp_path, caplog):
    """The default rule: the callback counts the training dataset's tokens (all 64 examples).
    Level b's rows never move, but no example holds them: a warning says they cannot
    matter, and training goes on; at step 2 some of level a's tokens, which the data does
    feed, have not been drawn yet: the alarm names those, with their counts, and stops."""
    data = FirstLevelOnly()
    want = np.bincount(np.concatenate([data[i]["input_ids"].numpy() for i in range(len(data))]))
    b_names = [f"<b_{i}>" for i in range(10)]
    cb = GeodiagCallback(
        levels=LEVELS,
        every_n_steps=2,
        untrained_after_steps=4,
        on_untrained="stop",
        gate_on_save=False,
    )
    args = training_args(tmp_path, max_steps=6, save_strategy="no")
    model = _distinct_new_rows(mean_init_model(tie=False))
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[cb])
    with caplog.at_level(logging.WARNING, logger="geodiag.callback"):
        trainer.train()
    assert trainer.state.global_step == 6  # b's tokens did not stop it
    assert "stopping training" not in caplog.text
    assert "10 untrained new tokens the training data never feeds (64 examples counted)" in (
        caplog.text
    )
    assert ", ".join(b_names) in caplog.text
    assert np.array_equal(cb._usage.counts, want) and cb._usage.complete
    records, _ = read_records(tmp_path / "run" / "geodiag_trajectory.jsonl")
    # Collapsed only while a token the data feeds is still unmoved (step 2: some of a's
    # tokens not drawn yet); b's never count. The recorded (and logged) n_untrained is the
    # count the alarm and the gate judge; the 10 b's are recorded as spared.
    structures = [r["structure"] for r in records]
    assert [r["collapsed"] for r in records] == [s["n_untrained"] > 0 for s in structures]
    assert structures[-1]["n_untrained"] == 0 and structures[-1]["n_untrained_spared"] == 10

    caplog.clear()
    cb = GeodiagCallback(
        levels=LEVELS,
        every_n_steps=1,
        untrained_after_steps=1,
        on_untrained="stop",
        gate_on_save=False,
    )
    args = training_args(tmp_path / "2", max_steps=6, save_strategy="no")
    model = _distinct_new_rows(mean_init_model(tie=False))
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[cb])
    with caplog.at_level(logging.WARNING, logger="geodiag.callback"):
        trainer.train()
    stopped = trainer.state.global_step
    line = next(r.getMessage() for r in caplog.records if "stopping training" in r.getMessage())
    assert f"after {stopped} steps" in line and "and the training data feeds them" in line
    named = [t for t in (f"<a_{i}>" for i in range(10)) if f"{t} (" in line]
    assert named and not any(f"{t} (" in line for t in b_names)
    for t in named:  # each with its count in the dataset, from the reference bincount
        assert f"{t} ({want[100 + int(t[3:-1])]}x in the training data)" in line


def test_inf_original_rows_skip_the_snapshot_naming_them(tmp_path, caplog):
    """An original row gone to Inf (F16 overflow) breaks every prompt holding its token:
    the callback says which, rather than measuring around it."""
    model = mean_init_model()
    with torch.no_grad():
        model.get_input_embeddings().weight[[4, 9]] = float("inf")
    args = SimpleNamespace(output_dir=str(tmp_path), report_to=[])
    cb = GeodiagCallback(new_token_ids=NEW, every_n_steps=1)
    with caplog.at_level(logging.WARNING, logger="geodiag.callback"):
        cb.on_step_end(args, _state(1), transformers.TrainerControl(), model=model)
    assert "2 original rows" in caplog.text and "[4, 9]" in caplog.text
    line = json.loads((tmp_path / "geodiag_trajectory.jsonl").read_text())
    assert line["kind"] == "skipped" and "[4, 9]" in line["reason"]
