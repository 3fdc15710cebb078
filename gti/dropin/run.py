"""``run_dropin``: ``gti init --sids FILE --items FILE``, GTI as a drop-in stage.

A framework's SID map (``gti.dropin.index``) + its item texts (``gti.dropin.items``) + any
local causal LM -> the index's own tokens added (spelled as the index spells them) -> row
init (``gti.init.REGISTRY``) -> optional grounding (``gti``: text <-> SID, LM frozen, only
the new rows train; resumable) -> the held-out probe before and after -> the output the
framework's own SFT continues from, with ``geodiag check`` of it, written atomically.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from geodiag.atomic import atomic_dir
from geodiag.errors import InputError
from geodiag.escape import terminal
from gti.checkpoint_files import TRAIN_LOG_FILENAME, check_output_dir, partial_dir
from gti.dropin.files import CHECKS_FILENAME, CHECKS_TEXT_FILENAME, SOURCE_FILENAME
from gti.dropin.index import IndexTokens, read_index
from gti.dropin.items import item_texts
from gti.dropin.probe import ProbeResult, probe
from gti.errors import Interrupted
from gti.init import InitContext
from gti.init.checkpoint import CONFIG_FILENAME, GroundingState
from gti.init.config import GroundingConfig, InitConfig
from gti.init.distill import distill_stream
from gti.init.grounding import NewRows, freeze
from gti.init.holdout import split_holdout
from gti.init.llamafactory import read_descriptions
from gti.init.pairs import PairStream
from gti.init.run import apply_row_init, base_tokenizer_for, row_init_record
from gti.init.trainer import train_grounding
from gti.models.backbone import resolve_backbone
from gti.options import fingerprinted
from gti.prompts import TEMPLATES_FILE, Templates, load_templates
from gti.training import resolve_device
from gti.vocab import VocabExtension, add_new_tokens

log = logging.getLogger(__name__)

MISSING_LISTED = 10  # items without text named in a warning or an error


def texts_of(index: IndexTokens, cfg: InitConfig) -> dict[str, str]:
    """The text of every index item that has one; too many without text is bad input."""
    fields = tuple(f.strip() for f in cfg.text_fields.split(",")) if cfg.text_fields else None
    texts = item_texts(Path(cfg.items), fields)  # type: ignore[arg-type]
    missing = [i for i in index.items if not texts.get(i)]
    if missing:
        named = ", ".join(terminal(i) for i in missing[:MISSING_LISTED])
        more = f" and {len(missing) - MISSING_LISTED} more" if len(missing) > MISSING_LISTED else ""
        share = len(missing) / len(index.items)
        what = f"{len(missing)} of {len(index.items)} items of {index.path} have no text in {cfg.items}: {named}{more}"
        if share > cfg.max_missing_texts:
            raise InputError(
                "--items",
                f"{what} ({share:.1%} > --max-missing-texts {cfg.max_missing_texts:g}); "
                "pass the item file of this index, or other --text-fields",
            )
        log.warning("%s; their tokens are initialized but not grounded", what)
    return {i: texts[i] for i in index.items if texts.get(i)}


def fingerprint(
    run_config: dict[str, object], index: IndexTokens, items_file: Path, g: GroundingConfig
) -> dict[str, object]:
    """What a resumed run must share with the run that saved its state."""
    return {
        **{k: v for k, v in run_config.items() if k not in ("grounding", "sids", "items", "out")},
        "index_sha256": index.sha256(),
        "items_sha256": hashlib.sha256(items_file.read_bytes()).hexdigest(),
        **{k: v for k, v in asdict(g).items() if k in fingerprinted(GroundingConfig)},
    }


def ground_index(
    model,
    tokenizer,
    ext: VocabExtension,
    index: IndexTokens,
    items: list[str],
    texts: dict[str, str],
    cfg: InitConfig,
    run_config: dict[str, object],
    templates: Templates,
    should_stop: Callable[[int], bool] | None,
) -> tuple[list[dict[str, object]], Unreached]:
    """Train the new rows on text <-> SID pairs of ``items`` (the model frozen); resumes from
    ``cfg.out``'s partial state. Raises Interrupted when it stopped early. Returns the
    training log and what the drawn pairs left out."""
    g = cfg.grounding
    freeze(model)
    rows = NewRows(model, ext)
    stream = PairStream(
        tokenizer,
        [texts[i] for i in items],
        [index.sid_string(i) for i in items],
        rows.slot.cpu(),
        batch_size=g.batch_size,
        seed=g.seed,
        max_text_chars=g.max_text_chars,
        repeats=(g.text_to_sid_repeats, g.sid_to_text_repeats),
        templates=templates,
    )
    distill = distill_stream(tokenizer, stream.texts, stream.sid_strings, rows.slot.cpu(), g)
    resume = GroundingState(
        partial_dir(Path(cfg.out)),
        fingerprint(run_config, index, Path(cfg.items), g),  # type: ignore[arg-type]
    )
    result = train_grounding(
        model, rows, stream, g, distill=distill, resume=resume, should_stop=should_stop
    )
    if not result.completed:
        raise Interrupted(result.step, str(resume.folder))
    rows.write_back(model)
    return result.log, unreached(index, items, stream, g.steps)


def unreached(index: IndexTokens, items: list[str], stream: PairStream, steps: int) -> Unreached:
    """What ``steps`` batches of ``stream`` (pairs of ``items``) leave out: the items never
    drawn, and the new tokens that no drawn item carries (they keep their init)."""
    shown = steps * stream.batch_size
    if shown >= stream.n_pairs:  # a whole epoch: every pair once
        drawn = set(items)
    else:
        drawn = {items[stream.key(i)[0]] for i in range(shown)}
    carried = {t for i in drawn for t in index.items[i]}
    one_pass = -(-stream.n_pairs // stream.batch_size)
    tokens = [t for t in index.tokens if t not in carried]
    return Unreached(len(items) - len(drawn), len(items), tokens, len(index.tokens), one_pass)


@dataclass
class Unreached:
    """The new tokens grounding never reached, and why: their items were not drawn."""

    items_undrawn: int
    items: int
    tokens: list[str]
    n_tokens: int
    one_pass_steps: int  # --steps that show every grounded item's pairs once

    def line(self, steps: int, batch_size: int) -> str:
        """The summary line of gti_checks.txt (empty: every token reached)."""
        if not self.tokens:
            return ""
        named = ", ".join(terminal(t) for t in self.tokens[:MISSING_LISTED])
        more = len(self.tokens) - MISSING_LISTED
        return (
            f"grounding never reached {len(self.tokens)} of {self.n_tokens} new tokens "
            f"({named}{f' and {more} more' if more > 0 else ''}): only items it never drew "
            f"carry them ({self.items_undrawn} of {self.items} grounded items undrawn in "
            f"{steps} steps x {batch_size}, or items without text); they keep their init, "
            "and geodiag check fails those the index feeds. "
            f"--steps {self.one_pass_steps} draws every item once"
        )


def run_dropin(
    cfg: InitConfig,
    *,
    index: IndexTokens | None = None,
    should_stop: Callable[[int], bool] | None = None,
) -> Path:
    """Write the framework-ready output to ``cfg.out`` and return its path. ``index``: the
    SID map as a typed value (default: ``cfg.sids`` read by geodiag's readers)."""
    cfg.validate()
    out = Path(cfg.out)
    check_output_dir(out, CONFIG_FILENAME)
    if cfg.model is None:
        raise InputError(
            "--model", "the drop-in route (--items) needs --model: a local model folder"
        )
    index = index or read_index(Path(cfg.sids), cfg.codebooks, cfg.sid_offset)
    templates = load_templates(cfg.templates or TEMPLATES_FILE)
    texts = texts_of(index, cfg)
    described = read_descriptions(cfg.descriptions) if cfg.descriptions else None
    held_out, grounded = split_holdout(list(texts), cfg.held_out_count(), cfg.seed, index.items)
    train_texts = {i: texts[i] for i in grounded}

    backbone = resolve_backbone(
        cfg.model, cache_dir=cfg.cache_dir, allow_download=cfg.allow_download, seed=cfg.seed
    )
    model, tokenizer = backbone.load()
    model.to(resolve_device(cfg.device))
    row_strategy = cfg.start_from if cfg.strategy == "gti" else cfg.strategy
    base_tokenizer = base_tokenizer_for(tokenizer, row_strategy)
    ext = add_new_tokens(
        model,
        tokenizer,
        index.tokens,
        as_strings=True,
        pad_to_multiple_of=cfg.pad_vocab_to_multiple_of,
    )
    slots = dict(zip(index.items, index.slots(list(index.items)), strict=True))
    context = InitContext(
        item_texts=train_texts,
        tokenizer=tokenizer,
        item_slots=slots,
        codebooks=index.codebooks,
        row_codes=[index.codes.get(t) for t in index.tokens],
        new_tokens=index.tokens,
        base_tokenizer=base_tokenizer,
        descriptions=described,
    )
    generator = torch.Generator().manual_seed(cfg.seed)
    apply_row_init(model, ext, row_strategy, generator, context, cfg.norm_correct)

    run_config: dict[str, object] = {
        "route": "drop-in",
        "strategy": cfg.strategy,
        "start_from": cfg.start_from if cfg.strategy == "gti" else None,
        **row_init_record(cfg),
        "model": backbone.name,
        "model_identity": backbone.identity,
        "sids": str(cfg.sids),
        "items": str(cfg.items),
        "text_fields": cfg.text_fields,
        "holdout": len(held_out),
        "seed": cfg.seed,
        "adapter": cfg.adapter,
        "templates": {"text_to_sid": list(templates[0]), "sid_to_text": list(templates[1])},
        "grounding": asdict(cfg.grounding) if cfg.strategy == "gti" else None,
    }
    g = cfg.grounding
    ask = templates[0][0]  # the probe's question: the first text -> SID template
    before = probe(model, tokenizer, index, held_out, texts, g.max_text_chars, ask)
    train_log, missed = None, None
    if cfg.strategy == "gti":
        train_log, missed = ground_index(
            model,
            tokenizer,
            ext,
            index,
            grounded,
            train_texts,
            cfg,
            run_config,
            templates,
            should_stop,
        )
    after = probe(model, tokenizer, index, held_out, texts, g.max_text_chars, ask)
    write_output(
        out, model, tokenizer, ext, index, cfg, run_config, train_log, before, after, missed
    )
    if cfg.strategy == "gti":
        GroundingState(partial_dir(out), {}).clear()
    return out


def source_description(index: IndexTokens, ext: VocabExtension, cfg: InitConfig) -> dict:
    """Our sidecar: which index and codebooks the new tokens are, by path and digest."""
    return {
        "format": "gti.sid_source",
        "format_version": 1,
        "sids": str(Path(index.path).resolve()),
        "codebooks": None if index.codebooks_path is None else str(index.codebooks_path.resolve()),
        "items": str(Path(cfg.items).resolve()),  # type: ignore[arg-type]
        "sha256": index.sha256(),
        "framework": index.framework,
        "detected": list(index.detected),
        "base_vocab_size": ext.base_vocab_size,
        "new_tokens": ext.n_new,
        "first_new_token_id": min(ext.new_token_ids),
    }


def write_output(
    out: Path,
    model,
    tokenizer,
    ext: VocabExtension,
    index: IndexTokens,
    cfg: InitConfig,
    run_config: dict[str, object],
    train_log: list[dict[str, object]] | None,
    before: ProbeResult,
    after: ProbeResult,
    missed: Unreached | None = None,
) -> None:
    """The output folder, built in a staging folder and renamed into place."""
    from gti.dropin.checks import gate_of

    with atomic_dir(out) as tmp:
        if cfg.adapter:
            from gti.dropin.adapter import save_adapter

            save_adapter(tmp, model, ext)
        else:
            model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / SOURCE_FILENAME).write_text(
            json.dumps(source_description(index, ext, cfg), indent=1)
        )
        (tmp / CONFIG_FILENAME).write_text(json.dumps(run_config, indent=1, allow_nan=False))
        if train_log is not None:
            lines = (json.dumps(e, allow_nan=False) for e in train_log)
            (tmp / TRAIN_LOG_FILENAME).write_text("".join(line + "\n" for line in lines))
        checks = {"probe": {"before": asdict(before), "after": asdict(after)}}
        summary = [f"probe before: {before.line()}", f"probe after:  {after.line()}"]
        if missed is not None:
            checks["unreached"] = asdict(missed)
        if not cfg.adapter:
            text, gate = gate_of(tmp, out, index)
            checks["geodiag_check"] = gate
            summary.append(text)
        if missed is not None and missed.tokens:
            summary.append(missed.line(cfg.grounding.steps, cfg.grounding.batch_size))
        (tmp / CHECKS_FILENAME).write_text(json.dumps(checks, indent=1, allow_nan=False))
        (tmp / CHECKS_TEXT_FILENAME).write_text("\n".join(summary) + "\n")
