"""``GeodiagCallback``: watch the new rows' geometry while a ``transformers.Trainer`` trains.

Every ``every_n_steps`` optimizer steps (and at the last step) the callback takes a
cheap snapshot of the new rows (:mod:`geodiag.metrics.snapshot`: centered
effective-rank ratio, spread against a seeded sample of original rows, mean cosine,
RSA of the chosen levels on a seeded sample; row by row, their movement since the run's
first snapshot, the rows that have not moved, per level, and those in a group of
identical rows; and the new rows' gradient norm at that optimizer step) and

- logs it through the Trainer as ``geodiag/<metric>``: it asks for a log event at that
  step (``control.should_log``) and adds its numbers to that event's ``logs`` and to
  ``state.log_history``. TensorBoard, W&B and the other ``report_to`` integrations are
  callbacks that the Trainer puts *before* yours; :meth:`GeodiagCallback.attach` moves
  this one in front of them so they record ``geodiag/*`` like the loss;
- appends one line to ``<output_dir>/geodiag_trajectory.jsonl`` (schema in
  :mod:`geodiag.gate.trajectory`; ``geodiag report`` plots it);
- optionally warns, or stops training (``control.should_training_stop``), when the rows
  are still collapsed at or after ``collapse_after_steps``: they fail one of the gate's
  collapse checks that the snapshot records (:func:`geodiag.gate.checks.collapse_checks`: the
  effective rank, ratio and absolute, the spread, the mean cosine, and
  ``max_untrained_tokens`` over the untrained rows below);
- optionally warns, or stops, when tokens are untrained at or after
  ``untrained_after_steps``, naming them. Untrained: the row has not moved since the
  first snapshot, or sits in a group of identical rows, where a distance counts when it
  exceeds :data:`geodiag.metrics.untrained.TOLERANCE` x the vocabulary's spread (RMS
  distance of the original rows to their mean, taken at the first snapshot), the rule of
  the gate's untrained check. The alarm fires when more than the gate's
  ``max_untrained_tokens`` (0 when that check is off) are untrained.

The gradient norm is read in ``on_pre_optimizer_step``: the ``.grad`` of the embedding
(and of an untied head) as the optimizer is about to use it, after gradient clipping and
the data-parallel average; ``null`` under ZeRO-3 (deepspeed keeps the gradients) and for
LoRA on the embedding.

At every save it runs the full gate (``geodiag check``) on the saved checkpoint folder,
writes ``geodiag_check.json`` into it, logs ``geodiag/gate_passed`` and appends a line
with ``"kind": "gate"`` to the trajectory. A PEFT adapter folder is not a full model: the
gate then measures the model in memory (the rows just saved).

Models: a plain ``PreTrainedModel`` or a PEFT model. Rows are read through the modules,
so trainable tokens, ``modules_to_save`` and LoRA on the embedding give their effective
rows (:mod:`geodiag.io.formats.memory`). An untied output head is measured as its own matrix
(``geodiag/output/<metric>``).

Distributed: under DDP only the main process (``state.is_world_process_zero``) measures,
logs and writes; with a ``"stop"`` option every process measures (the weights are the
same on every rank, so each reaches the same decision without communicating). Under
DeepSpeed ZeRO-3 the embedding is partitioned: every process enters
``deepspeed.zero.GatheredParameters`` for the embedding weights (a collective), the main
process measures inside it. If deepspeed cannot be imported the snapshot is skipped with
a warning and a ``"skipped"`` line; training goes on. Under FSDP2 (``fully_shard``: the
embedding is a DTensor sharded by rows) every process ``unshard()``-s the module that
holds it (a collective) and reshards after, and gathers the new rows' DTensor gradient
(``full_tensor()``, a collective) on each measured step. The figures equal a
single-process run's on the same data and seed, to float32 rounding
(tests/geodiag/callback/test_trainer_distributed.py: DDP and FSDP2, gloo, two processes).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from transformers import TrainerCallback
from transformers.utils import logging

from geodiag.analysis.findings import ALARM_TOKENS, ITEM_IDS, counts_against, items_per_code
from geodiag.analysis.options import SNAPSHOT_PERMUTATIONS, SNAPSHOT_RSA_SAMPLE, AnalyzeOptions
from geodiag.callback.checkpoints import (
    describe_checkpoint,
    gate_saved,
    reads_memory,
    write_check,
)
from geodiag.callback.distributed import join_gather, partitioned
from geodiag.callback.snapshots import (
    Collapse,
    DataUsage,
    FirstRows,
    collapse_of,
    dataset_usage,
    empty_structure,
    logs_of,
    measure_matrices,
    untrained_why,
)
from geodiag.errors import InputError
from geodiag.gate.checks import CheckName, GateConfig
from geodiag.gate.trajectory import (
    TRAJECTORY_FILENAME,
    append_record,
    record,
    structure_of_report,
    truncate_after,
)
from geodiag.io.vocabulary.new_tokens import declare
from geodiag.io.vocabulary.tokenizer import list_names
from geodiag.settings import default_of

logger = logging.get_logger(__name__)


class GeodiagCallback(TrainerCallback):
    """Measure the new-token rows every ``every_n_steps`` steps and gate each saved checkpoint.

    Args:
        new_token_ids: ids of the new rows (any order). Optional when ``levels`` is given.
        every_n_steps: optimizer steps between snapshots (the last step is always measured).
        levels: ``{level: token ids in code order}`` or a ``semantic_ids.json`` with token
            ids; needed for RSA.
        codebooks: ``{level: (codes, code_dim) array}`` or a ``.safetensors`` file
            (default with a sidecar: its ``codebooks.safetensors``), or the codebooks file
            of the framework that wrote ``sids``.
        sids: a framework's SID map in place of ``levels`` (LC-Rec / MiniOneRec
            ``*.index.json``, ETEGRec ``*.code.json``, GRID's tensor, a ``.npy``, a parquet
            table: ``geodiag --sids``), its tokens named by the Trainer's tokenizer
            (``processing_class``) when the run starts.
        rsa_levels: levels whose RSA the snapshot computes (default: the first, coarsest).
        rsa_sample, rsa_permutations: tokens per level and permutations for that RSA.
        base_vocab_size: original rows are ``[0, N)`` (default: the levels' sidecar's,
            else the smallest new id; :func:`geodiag.io.vocabulary.new_tokens.declare`).
        seed: seed of the reference sample and of the RSA sample/permutations.
        gate: thresholds, for the collapse test and the save-time gate.
        gate_on_save: run the full gate on each saved checkpoint.
        describe_checkpoints: when ``levels`` are known, write ``semantic_ids.json`` (token
            ids, levels, the step) and ``codebooks.safetensors`` into each saved checkpoint
            that lacks them, so ``geodiag check|report run/checkpoint-*`` need no flags.
        collapse_after_steps: from this step on, a collapsed snapshot triggers ``on_collapse``.
        on_collapse: ``"warn"`` (once) or ``"stop"`` (``control.should_training_stop``).
        untrained_after_steps: from this step on, untrained tokens (not moved since the
            first snapshot, or in a group of identical rows) trigger ``on_untrained``.
        on_untrained: ``"warn"`` (once) or ``"stop"``; the message names the tokens.
        trajectory_file: file name in ``args.output_dir``; ``None`` writes nothing.
        prefix: of the logged metric names.
    """

    def __init__(
        self,
        new_token_ids=None,
        *,
        every_n_steps: int = 50,
        levels=None,
        codebooks=None,
        sids=None,
        rsa_levels: list[str] | None = None,
        rsa_sample: int = SNAPSHOT_RSA_SAMPLE,
        rsa_permutations: int = SNAPSHOT_PERMUTATIONS,
        base_vocab_size: int | None = None,
        seed: int = default_of(AnalyzeOptions, "seed"),
        gate: GateConfig | None = None,
        gate_on_save: bool = True,
        describe_checkpoints: bool = True,
        collapse_after_steps: int | None = None,
        on_collapse: str = "warn",
        untrained_after_steps: int | None = None,
        on_untrained: str = "warn",
        trajectory_file: str | None = TRAJECTORY_FILENAME,
        prefix: str = "geodiag/",
    ) -> None:
        if new_token_ids is None and levels is None and sids is None:
            raise ValueError("GeodiagCallback needs new_token_ids=[...], levels=... or sids=...")
        if levels is not None and sids is not None:
            raise ValueError("GeodiagCallback takes levels=... or sids=..., not both")
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps}")
        if on_collapse not in ("warn", "stop"):
            raise ValueError(f"on_collapse must be 'warn' or 'stop', got {on_collapse!r}")
        if on_untrained not in ("warn", "stop"):
            raise ValueError(f"on_untrained must be 'warn' or 'stop', got {on_untrained!r}")
        self.new_token_ids = None if new_token_ids is None else [int(i) for i in new_token_ids]
        self.every_n_steps = every_n_steps
        self.levels = levels
        self.codebooks = codebooks
        self.sids = sids
        self.rsa_levels = rsa_levels
        self.rsa_sample = rsa_sample
        self.rsa_permutations = rsa_permutations
        self.base_vocab_size = base_vocab_size
        self.seed = seed
        self.gate = gate or GateConfig()
        self.gate_on_save = gate_on_save
        self.describe_checkpoints = describe_checkpoints
        self.collapse_after_steps = collapse_after_steps
        self.on_collapse = on_collapse
        self.untrained_after_steps = untrained_after_steps
        self.on_untrained = on_untrained
        self.trajectory_file = trajectory_file
        self.prefix = prefix
        self._attached = False
        self._trainer = None
        self._pending: dict[str, float] = {}
        self._pending_step: int | None = None
        self._t0 = time.monotonic()
        self._elapsed_offset = 0.0
        self._warned_collapse = False
        self._warned_untrained = False
        self._warned_spared = False
        self._usage: DataUsage | None = None  # the training dataset's token counts
        # Items whose SID uses each new token's code, from the SID map the model's folder (or
        # levels / sids) gives: the gate's other usage source (None: no map).
        self._items: dict[int, int] | None = None
        self._described_by = None  # the sidecar found beside the model, to describe saves
        self._rows: dict[str, FirstRows] = {}  # role -> fixed at the first snapshot
        self._grads: dict[str, float | None] = {}
        self._grad_step: int | None = None
        self._tokenizer = None
        self._ids: np.ndarray | None = None
        self.last_structure: dict | None = None
        self.last_untrained: list[str] = []  # names of the untrained tokens, last snapshot

    # -- wiring -------------------------------------------------------------------------

    def attach(self, trainer) -> GeodiagCallback:
        """Put this callback first in ``trainer``'s list (adding it if missing), so the
        ``report_to`` integrations (TensorBoard, W&B, ...) see ``geodiag/*`` in each log."""
        callbacks = trainer.callback_handler.callbacks
        if self in callbacks:
            callbacks.remove(self)
        callbacks.insert(0, self)
        self._attached = True
        self._trainer = trainer
        return self

    def _path(self, args) -> Path | None:
        return (
            None if self.trajectory_file is None else Path(args.output_dir) / self.trajectory_file
        )

    def _elapsed(self) -> float:
        return self._elapsed_offset + time.monotonic() - self._t0

    def _take_sids(self) -> None:
        """``sids`` matched to the Trainer's tokenizer, once: its levels and codebooks."""
        if self.sids is None or self.levels is not None:
            return
        if self._tokenizer is None:
            raise InputError("sids", "needs the Trainer's tokenizer (processing_class)")
        from geodiag.io.vocabulary.sid_index import read_foreign

        books = self.codebooks if isinstance(self.codebooks, str | Path) else None
        found = read_foreign(self.sids, books, self._tokenizer)
        self.levels = found.sids
        self.codebooks = found.codebooks or self.codebooks

    def _source(self) -> dict:
        """What :func:`geodiag.api.open_source` needs to know about the new rows."""
        self._take_sids()
        return dict(
            new_ids=self.new_token_ids,
            levels=self.levels,
            codebooks=self.codebooks,
            base_vocab_size=self.base_vocab_size,
        )

    def _new_ids(self) -> np.ndarray:
        if self._ids is None:  # may read a semantic_ids.json
            self._take_sids()
            self._ids = declare(self.new_token_ids, self.levels, self.base_vocab_size).ids
        return self._ids

    # -- measuring ----------------------------------------------------------------------

    def measure(self, model) -> dict[str, dict]:
        """{matrix role: structure} of ``model`` now (cheap snapshot). Raises InputError.

        The first call of a run fixes the reference of the row-by-row findings (the rows
        then, and the tolerance from the vocabulary's spread then)."""
        return {role: s for role, (s, *_) in self._measure(model).items()}

    def _measure(self, model) -> dict[str, tuple[dict, np.ndarray, dict[int, str]]]:
        """{role: (structure, untrained ids, their names)}: measure_matrices'."""
        from geodiag.api import open_source
        from geodiag.io.formats.memory import gathered

        with gathered(model):
            ckpt = open_source(model, **self._source(), tokenizer=self._tokenizer)
            self._learn(ckpt)
            return measure_matrices(
                ckpt,
                self._rows,
                rsa_levels=self.rsa_levels,
                rsa_sample=self.rsa_sample,
                rsa_permutations=self.rsa_permutations,
                seed=self.seed,
            )

    def _learn(self, ckpt) -> None:
        """What the assembly found that the arguments did not say: the items per code of
        the SID map (dead codes feed nothing, as the gate judges), and the sidecar beside
        the model, for the saved checkpoints' description."""
        counts = items_per_code(ckpt, ckpt.new.ids)
        if counts is not None:
            self._items = {
                int(i): int(c) for i, c in zip(ckpt.new.ids, counts, strict=True) if c >= 0
            }
        if self.levels is None and ckpt.sidecar is not None and ckpt.new.source == "sidecar":
            self._described_by = ckpt.own_sidecar or ckpt.sidecar

    # -- TrainerCallback hooks ----------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._t0 = time.monotonic()
        self._rows, self._grads, self._grad_step = {}, {}, None
        self._tokenizer = kwargs.get("processing_class")
        # The training data: the dataloader the Trainer hands its callbacks, else the
        # dataset of the trainer this callback was attached to.
        loader = kwargs.get("train_dataloader")
        dataset = getattr(loader, "dataset", None)
        if dataset is None and self._trainer is not None:
            dataset = getattr(self._trainer, "train_dataset", None)
        self._usage = None if dataset is None else dataset_usage(dataset)
        if not state.is_world_process_zero:
            if state.global_step == 0 and model is not None:
                self._measure_on_this_rank(args, state, control, model, log=False)
            return
        path = self._path(args)
        if path is not None and path.is_file():
            # Resumed (or re-run) in the same folder: the records past this step are stale.
            self._elapsed_offset = truncate_after(path, state.global_step) or 0.0
        reporters = [r for r in (args.report_to or []) if r not in ("none", None)]
        if reporters and not self._attached:
            logger.warning(
                "GeodiagCallback is not attached: %s run before it and will not see geodiag/* "
                "(they reach state.log_history and %s). Call callback.attach(trainer).",
                ", ".join(reporters),
                self.trajectory_file,
            )
        if state.global_step == 0 and model is not None:
            self._measure_on_this_rank(args, state, control, model, log=False)  # the start

    def _due(self, state, step: int | None = None) -> bool:
        step = state.global_step if step is None else step
        return step > 0 and (step % self.every_n_steps == 0 or step == state.max_steps)

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        """The new rows' gradient norm for the snapshot of the step about to end. Every
        rank reads it (under FSDP2 a collective gather; elsewhere cheap and local)."""
        step = state.global_step + 1
        if model is None or not self._due(state, step):
            return control
        from geodiag.io.formats.memory import gradient_norms

        try:
            self._grads = gradient_norms(model, self._new_ids())
        except (AttributeError, InputError, ValueError) as e:
            self._grads = {}
            if state.is_world_process_zero:
                logger.warning("geodiag: gradient of the new rows not read at step %d: %s", step, e)
        self._grad_step = step
        return control

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if model is None or not self._due(state):
            return control
        self._measure_on_this_rank(args, state, control, model, log=True)
        return control

    def _measure_on_this_rank(self, args, state, control, model, *, log: bool) -> None:
        """The main process measures; the others too when they must decide a stop, and
        otherwise only join the ZeRO-3 gather (a collective) without measuring."""
        if state.is_world_process_zero or "stop" in (self.on_collapse, self.on_untrained):
            self._snapshot(args, state, control, model, log=log)
        elif partitioned(model):
            join_gather(model)

    def _snapshot(self, args, state, control, model, *, log: bool) -> None:
        main = state.is_world_process_zero
        step = state.global_step
        try:
            measured = self._measure(model)
        except (InputError, ValueError) as e:
            if main:
                logger.warning("geodiag snapshot at step %d skipped: %s", step, e)
                rec = record(
                    step, self._elapsed(), empty_structure(), kind="skipped", reason=str(e)
                )
                self._write(args, rec)
            return
        structures = {role: s for role, (s, *_) in measured.items()}
        for role, s in structures.items():
            s["grad_norm"] = self._grads.get(role) if self._grad_step == step else None
        s, ids, names = measured["input"]
        self.last_structure = s
        self.last_untrained = [names[int(i)] for i in ids[:ALARM_TOKENS] if int(i) in names]
        collapse = self._alarms(control, main, step, s, ids, names)
        if not main:
            return
        extra = {k: v for k, v in structures.items() if k != "input"}
        self._write(
            args,
            record(
                step,
                self._elapsed(),
                s,
                kind="snapshot",
                collapsed=collapse.collapsed,
                **({"structure_output": extra["output"]} if extra else {}),
            ),
        )
        if log:
            logs = logs_of(structures, self.prefix)
            logs[self.prefix + "collapsed"] = float(collapse.collapsed)
            self._queue(logs, step)
            control.should_log = True

    def _split(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[tuple] | None]:
        """(the untrained ``ids`` the alarm counts, most used first; those nothing feeds,
        so they cannot matter; per counted id its (training-data uses, items), None without
        a usage source). The gate's rule (:func:`geodiag.analysis.findings.counts_against`)
        over the gate's sources: the SID map's items (a dead code feeds nothing) and the
        training data (a dataset counted only in part says nothing of a zero)."""
        rule = self.gate.untrained_uses_to_fail
        if (self._usage is None and self._items is None) or not rule:
            return ids, ids[:0], None
        data = self._usage.of(ids) if self._usage is not None else np.zeros(len(ids), np.int64)
        items = np.array([(self._items or {}).get(int(i), -1) for i in ids], np.int64)
        uses = data + np.maximum(items, 0)
        known = (items >= 0) | (self._usage is not None and self._usage.complete)
        counted = counts_against(uses, known, rule)
        order = np.argsort(-uses[counted], kind="stable")
        pairs = list(
            zip(data[counted][order].tolist(), items[counted][order].tolist(), strict=True)
        )
        return ids[counted][order], ids[~counted], pairs

    def _fed_by(self) -> str:
        """The sources that feed the counted tokens, as the messages name them."""
        said = [ITEM_IDS] if self._items is not None else []
        said += ["the training data"] if self._usage is not None else []
        return " and ".join(said)

    def _never_fed(self) -> str:
        """Why the spared tokens cannot matter, from the sources counted."""
        said = ["no item's ID uses their codes"] if self._items is not None else []
        if self._usage is not None:
            said.append(
                f"the training data never feeds them ({self._usage.n_examples} examples counted)"
            )
        return " and ".join(said)

    def _named(self, ids: np.ndarray, uses: list[tuple] | None, names: dict[int, str]) -> str:
        shown = [names.get(int(i), f"<id {int(i)}>") for i in ids[:ALARM_TOKENS]]
        if uses is not None:
            shown = [f"{n} ({self._uses(*u)})" for n, u in zip(shown, uses, strict=False)]
        return list_names(shown, len(ids))

    def _uses(self, data: int, items: int) -> str:
        said = [f"{data}x in the training data"] if self._usage is not None else []
        said += [f"{items} {'item ID' if items == 1 else 'item IDs'}"] if items > 0 else []
        return ", ".join(said) or "use unknown"

    def _alarms(
        self, control, main: bool, step: int, s: dict, ids: np.ndarray, names: dict[int, str]
    ) -> Collapse:
        """Raise the collapse and the untrained alarms that the snapshot ``s`` calls for:
        the untrained tokens something feeds (all of them without a usage source). ``s``'s
        untrained count becomes the one the gate's rule counts, as logged and recorded."""
        counted, spared, uses = self._split(ids)
        s[CheckName.N_UNTRAINED] = len(counted)
        s["n_untrained_spared"] = len(spared)
        collapse = collapse_of(s, self.gate)
        due = self.collapse_after_steps is not None and step >= self.collapse_after_steps
        if due and collapse.collapsed:
            msg = (
                f"geodiag: the new-token rows are still collapsed at step {step} "
                f"({'; '.join(collapse.why)})"
            )
            self._alarm(control, main, msg, self.on_collapse, "_warned_collapse")
        due = self.untrained_after_steps is not None and step >= self.untrained_after_steps
        limit = self.gate.max_untrained_tokens
        if due and len(counted) > (0 if limit is None else limit):
            verb = "feed" if self._items is not None and self._usage is not None else "feeds"
            fed = "" if uses is None else f" and {self._fed_by()} {verb} them"
            part = ""
            if self._usage is not None and not self._usage.complete:
                part = f" (counted over its first {self._usage.n_examples} examples)"
            msg = (
                f"geodiag: {len(counted)} of {len(self._new_ids())} new tokens are untrained "
                f"after {step} steps ({untrained_why(s, self._rows['input'])}){fed}{part}: "
                + self._named(counted, uses, names)
            )
            self._alarm(control, main, msg, self.on_untrained, "_warned_untrained")
        if due and len(spared) and main and not self._warned_spared:
            logger.warning(
                "geodiag: %d untrained new tokens %s, so they cannot matter to this run: %s",
                len(spared),
                self._spared_words(),
                self._named(spared, None, names),
            )
            self._warned_spared = True
        return collapse

    def _spared_words(self) -> str:
        if self._items is None:  # the data alone, as before the SID map was read
            return f"the training data never feeds ({self._usage.n_examples} examples counted)"
        return f"nothing feeds ({self._never_fed()})"

    def _alarm(self, control, main: bool, msg: str, action: str, warned: str) -> None:
        """``action`` "stop": stop (every rank decides the same); "warn": once per run."""
        if action == "stop":
            control.should_training_stop = True
            if main:
                logger.warning("%s: stopping training", msg)
        elif main and not getattr(self, warned):
            logger.warning("%s", msg)
            setattr(self, warned, True)

    def _queue(self, logs: dict[str, float], step: int) -> None:
        if self._pending_step is not None and self._pending_step != step:
            self._pending = {}
        self._pending.update(logs)
        self._pending_step = step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self._pending or logs is None or not state.is_world_process_zero:
            return
        logs.update(self._pending)
        last = state.log_history[-1] if state.log_history else None
        if last is not None and last.get("step") == state.global_step:
            last.update(self._pending)
        self._pending, self._pending_step = {}, None

    def on_save(self, args, state, control, model=None, **kwargs):
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and self.describe_checkpoints and folder.is_dir():
            try:
                describe_checkpoint(
                    folder,
                    state.global_step,
                    self.levels if self.levels is not None else self._described_by,
                    self.codebooks,
                    self.base_vocab_size,
                )
            except (InputError, OSError) as e:
                logger.warning("geodiag: could not describe %s: %s", folder, e)
        if not self.gate_on_save:
            return
        if not state.is_world_process_zero:
            if model is not None and partitioned(model) and reads_memory(folder):
                join_gather(model)  # the main process gathers to measure
            return
        try:
            result, report, source = gate_saved(folder, model, self.gate, self.seed, self._source())
        except (InputError, ValueError) as e:
            logger.warning("geodiag gate on %s skipped: %s", folder, e)
            return
        self._record_gate(args, state, folder, result, report, source)

    def _record_gate(self, args, state, folder: Path, result, report, source: str) -> None:
        """The save-time gate's result: in the folder, the trajectory and the log."""
        if folder.is_dir():
            write_check(folder, result, self.gate, source)
        failed = [f"{c.name} ({c.matrix})" for c in result.checks if c.status == "fail"]
        if failed:
            logger.warning("geodiag gate FAILED on %s: %s", folder, ", ".join(failed))
        gate = {"passed": result.passed, "failed": failed, "measured": source}
        self._write(
            args,
            record(
                state.global_step,
                self._elapsed(),
                structure_of_report(report),
                kind="gate",
                checkpoint=str(folder),
                gate=gate,
            ),
        )
        logs = {self.prefix + "gate_passed": float(result.passed)}
        if self._trainer is not None:
            self._trainer.log(logs)  # on_save comes after this step's log event
        else:
            self._queue(logs, state.global_step)

    def _write(self, args, rec: dict) -> None:
        path = self._path(args)
        if path is not None:
            append_record(path, rec)


__all__ = ["GeodiagCallback", "collapse_of"]
