"""``ProbeCallback``: the Stage-1 probe inside a ``transformers.Trainer`` run, on the model in
memory (no reload).

At each evaluation (``on_evaluate``) and each save (``on_save``) the main process runs
:func:`gti.probe.measure.probe_model` on the items :func:`gti.probe.source.resolve_source`
finds for the config's checkpoint (the folder the run started from: a ``gti init`` output
or a drop-in one, or ``sids``/``items``), then

- logs its figures as scalars (:func:`probe_logs`, ``probe/exact_match``,
  ``probe/accuracy_a``, ..., the baselines' and the likelihoods') through
  ``trainer.log``, so the ``report_to`` integrations (TensorBoard, W&B) record them
  wherever they sit in the callback list; hence :meth:`ProbeCallback.attach`;
- at a save, writes ``probe.json`` (the ``gti probe --write`` file) into the
  ``checkpoint-N`` folder, which ``geodiag report`` then shows.

An evaluation and a save at the same step share one probe. The probe sets the model to
eval mode (no dropout) and puts it back as it found it; it draws no torch random numbers,
so training goes on as it would have without it.

It lives in gti, not in geodiag's callback: geodiag never imports gti
(tests/geodiag/test_import_graph.py), and the probe decodes with the model, which
needs torch and gti's prompts. Use it beside ``GeodiagCallback``.

Distributed: only the main process (``state.is_world_process_zero``) probes, logs and
writes; the others go on training (under DDP every rank holds the whole model, so the
main one needs nobody). A model whose embedding is partitioned (ZeRO-3, FSDP2) cannot run
a forward pass on one rank alone: the probe is then skipped with a warning.
"""

from __future__ import annotations

import time
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import logging

from geodiag.atomic import atomic_write
from geodiag.callback.distributed import partitioned
from geodiag.errors import InputError
from geodiag.jsonio import dumps
from geodiag.outputs.report.probe import PROBE_FILENAME
from gti.probe.config import ProbeConfig
from gti.probe.measure import Decoding, ProbeResult, probe_model
from gti.probe.source import ProbeSource, check_tokens, resolve_source

logger = logging.get_logger(__name__)
WHEN = ("evaluate", "save")


def _decoding_logs(d: Decoding, prefix: str) -> dict[str, float]:
    logs = {prefix + "exact_match": d.exact_match.estimate}
    logs.update({f"{prefix}accuracy_{lv.level}": lv.accuracy.estimate for lv in d.levels})
    return logs


def probe_logs(r: ProbeResult, prefix: str = "probe/") -> dict[str, float]:
    """The probe's figures as scalars: the model's exact match and per-level accuracy, the
    same for each baseline (``<prefix>tie_break/...``, ``<prefix>most_frequent/...``), the
    SID -> text likelihoods (nats per token), their paired difference, its sign-flip p and
    the share of items whose own SID is the likelier, and the probe's seconds."""
    lik = r.likelihood
    return {
        **_decoding_logs(r.model, prefix),
        **_decoding_logs(r.tie_break.decoding, prefix + "tie_break/"),
        **_decoding_logs(r.most_frequent.decoding, prefix + "most_frequent/"),
        prefix + "loglik_own_sid": lik.true_mean,
        prefix + "loglik_shuffled_sid": lik.shuffled_mean,
        prefix + "loglik_difference": lik.difference.estimate,
        prefix + "loglik_p_value": lik.p_value,
        prefix + "own_sid_likelier": lik.true_wins.estimate,
        prefix + "seconds": r.seconds["total"],
    }


class ProbeCallback(TrainerCallback):
    """Run ``gti probe`` on the model being trained, at evaluations and saves.

    Args:
        config: what ``gti probe`` would be given: ``checkpoint`` is the folder that
            records the SIDs and item texts (the one the run started from), and
            ``sids``/``items``, ``sample`` (items probed when that folder records no
            held-out set: the cost), ``seed``, ``batch_size``, ``n_resamples``, ``data``,
            ``cache_dir`` as for the command. Its ``out``, ``write``, ``device`` and
            ``dtype`` do not apply: the model is the Trainer's, where it is.
        when: ``"evaluate"``, ``"save"`` or both.
        prefix: of the logged scalar names.
    """

    def __init__(
        self,
        config: ProbeConfig,
        *,
        when: tuple[str, ...] = WHEN,
        prefix: str = "probe/",
    ) -> None:
        unknown = sorted(set(when) - set(WHEN))
        if unknown or not when:
            raise ValueError(f"when: choose from {', '.join(WHEN)}, got {list(when)}")
        config.validate()
        self.config = config
        self.when = tuple(when)
        self.prefix = prefix
        self.last_result: ProbeResult | None = None
        self._source: ProbeSource | None = None
        self._tokenizer = None
        self._trainer = None
        self._step: int | None = None  # the step last_result was probed at
        self._logged: int | None = None
        self._warned = False

    def attach(self, trainer) -> ProbeCallback:
        """Add this callback to ``trainer`` (once) and log through it, so every ``report_to``
        integration records the probe's scalars."""
        if self not in trainer.callback_handler.callbacks:
            trainer.add_callback(self)
        self._trainer = trainer
        return self

    # -- probing ------------------------------------------------------------------------

    def _prepare(self, model) -> None:
        """The items and the tokenizer, once: resolved from the config's files, the
        index's tokens checked against the model."""
        if self._source is not None:
            return
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(
                self.config.checkpoint, local_files_only=True
            )
        source = resolve_source(self.config)
        rows = model.get_input_embeddings().weight.shape[0]
        check_tokens(source.index, self._tokenizer, rows, Path(self.config.checkpoint))
        self._source = source

    def probe(self, model, checkpoint: str = "") -> ProbeResult:
        """The probe's figures for ``model`` now; the model's train/eval mode is kept."""
        self._prepare(model)
        training = model.training
        try:
            return probe_model(
                model,
                self._tokenizer,
                self._source,
                checkpoint=checkpoint,
                seed=self.config.seed,
                batch_size=self.config.batch_size,
                n_resamples=self.config.n_resamples,
            )
        finally:
            model.train(training)

    def _result_at(self, state, model) -> ProbeResult | None:
        """This step's result (probed once per step), or None where the probe cannot run."""
        if self._step == state.global_step and self.last_result is not None:
            return self.last_result
        if model is None or partitioned(model):
            if not self._warned:
                why = "no model" if model is None else "the embedding is partitioned"
                logger.warning("gti probe skipped during training: %s", why)
                self._warned = True
            return None
        t0 = time.perf_counter()
        try:
            result = self.probe(model)
        except InputError as e:
            if not self._warned:
                logger.warning("gti probe skipped during training: %s", e)
                self._warned = True
            return None
        logger.info("gti probe at step %d: %.1f s", state.global_step, time.perf_counter() - t0)
        self.last_result, self._step = result, state.global_step
        return result

    def _log(self, state, result: ProbeResult) -> None:
        if self._logged == state.global_step:
            return
        logs = probe_logs(result, self.prefix)
        if self._trainer is not None:
            self._trainer.log(logs)
        else:  # not attached: the history only (the integrations ran before this hook)
            state.log_history.append({**logs, "step": state.global_step})
        self._logged = state.global_step

    # -- TrainerCallback hooks ----------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        self._tokenizer = kwargs.get("processing_class") or self._tokenizer
        reporters = [r for r in (args.report_to or []) if r not in ("none", None)]
        if state.is_world_process_zero and reporters and self._trainer is None:
            logger.warning(
                "ProbeCallback is not attached: %s will not record probe/* (they reach "
                "state.log_history). Call callback.attach(trainer).",
                ", ".join(reporters),
            )

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        if "evaluate" not in self.when or not state.is_world_process_zero:
            return
        result = self._result_at(state, model)
        if result is not None:
            self._log(state, result)

    def on_save(self, args, state, control, model=None, **kwargs):
        if "save" not in self.when or not state.is_world_process_zero:
            return
        result = self._result_at(state, model)
        if result is None:
            return
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if folder.is_dir():
            result.checkpoint = str(folder)
            atomic_write(folder / PROBE_FILENAME, dumps(result) + "\n")
        self._log(state, result)
