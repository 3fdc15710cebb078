"""``run_init``: the library entry behind ``gti init``.

sids folder + backbone -> new tokens in tokenizer and model -> row init (registry)
-> optional grounding (``gti``) -> contract checkpoint, written atomically.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel

from geodiag.errors import InputError
from geodiag.io.formats.safetensors import SafetensorsFile
from geodiag.io.vocabulary.sidecar import CODEBOOKS_FILENAME, SemanticIds, load
from gti.checkpoint_files import check_output_dir, partial_dir, write_checkpoint
from gti.data.sources import load_dataset
from gti.errors import Interrupted
from gti.init import REGISTRY, InitContext, needs, signature
from gti.init.checkpoint import CONFIG_FILENAME, GroundingState
from gti.init.config import GroundingConfig, InitConfig
from gti.init.distill import distill_stream
from gti.init.grounding import NewRows, freeze
from gti.init.holdout import split_holdout
from gti.init.llamafactory import read_descriptions
from gti.init.norm import norm_correct
from gti.init.pairs import PairStream
from gti.init.parallel import Group, join, launched_world, local_device
from gti.init.peft_rows import adapter_base, save_adapter
from gti.init.sharding import gathered_weights, local_parameters, shard_backbone, whole_root
from gti.init.structure import ProbeItems, StructureProbe
from gti.init.trainer import train_grounding
from gti.models.backbone import resolve_backbone
from gti.models.smollm2 import NAME as DEFAULT_MODEL
from gti.options import fingerprinted
from gti.prompts import sid_strings
from gti.training import TrainResult, resolve_device
from gti.vocab import VocabExtension, extend_vocabulary, old_rows, set_new_rows, with_token_ids

log = logging.getLogger(__name__)
DEFAULT_DATA = "movielens-100k"


def apply_row_init(
    model: PreTrainedModel,
    ext: VocabExtension,
    strategy: str,
    generator: torch.Generator,
    context: InitContext,
    norm_rule: str = "none",
) -> None:
    """Fill the new rows of the input embedding (and of an untied head) by ``strategy``,
    then apply the ``--norm-correct`` rule ``norm_rule`` against each matrix's old rows."""
    fn = REGISTRY[strategy]
    context.input_rows = old_rows(model, ext, "input").cpu()  # (V, d)
    for matrix in ("input",) if ext.tied else ("input", "output"):
        context.matrix = matrix
        old = old_rows(model, ext, matrix)  # (V, d)
        rows = fn(old=old.cpu(), n_new=ext.n_new, generator=generator, context=context)
        rows = norm_correct(rows, old.cpu(), norm_rule)
        set_new_rows(model, ext, matrix, rows)


def base_tokenizer_for(tokenizer, strategy: str):
    """A copy of ``tokenizer`` before the new tokens are added, for a strategy that splits
    their strings as the original tokenizer does (``subword``); else None."""
    return copy.deepcopy(tokenizer) if "base_tokenizer" in needs(strategy) else None


def row_init_record(cfg: InitConfig) -> dict[str, object]:
    """What init_config.json records of the row init's settings, on either route (gti's
    SIDs, or a framework's index)."""
    return {
        "norm_correct": cfg.norm_correct,
        "pad_vocab_to_multiple_of": cfg.pad_vocab_to_multiple_of,
        "descriptions": None if cfg.descriptions is None else str(cfg.descriptions),
    }


def read_codebooks(
    codebooks: Path, sids: SemanticIds, *, every_level: bool = True
) -> dict[str, np.ndarray]:
    """Level name -> its codebook (codes, code_dim), float64, from a sids folder's file;
    ``every_level`` False leaves out a level without one (a dedup level has none)."""
    book_file = SafetensorsFile(codebooks)
    books = {}
    for lv in sids.levels:
        if lv.name not in book_file.tensors:
            if not every_level:
                continue
            raise InputError(codebooks, f"no codebook for level '{lv.name}'")
        books[lv.name] = book_file.read(lv.name).astype(np.float64)
    return books


def sid_tokens(sids: SemanticIds) -> dict[str, tuple[str, ...]]:
    """Item -> its SID's token strings, level by level (what the hold-out must not strand)."""
    return {
        item: tuple(lv.token(c) for lv, c in zip(sids.levels, codes, strict=True))
        for item, codes in sids.items.items()
    }


def _item_texts(sids: SemanticIds, data: str, cache_dir: Path | None) -> dict[str, str]:
    catalog = load_dataset(data, cache_dir).catalog
    missing = [i for i in sids.items if i not in catalog]
    if missing:
        raise InputError(
            "--data",
            f"{len(missing)} item(s) of the semantic IDs are not in {data!r} (e.g. {missing[0]!r}); "
            "pass the --data the sids were built from",
        )
    return {i: catalog.items[catalog.index(i)].text for i in sids.items}


def structure_probe(
    model: PreTrainedModel,
    tokenizer: object,
    rows: NewRows,
    sids: SemanticIds,
    items: list[str],
    item_texts: dict[str, str],
    codebooks: Path,
    ext: VocabExtension,
    g: GroundingConfig,
) -> StructureProbe:
    """The structure-curve probe of a grounding run (codebooks: the yardstick only)."""
    books = read_codebooks(codebooks, sids)
    return StructureProbe(
        model,
        tokenizer,  # type: ignore[arg-type]
        rows,
        ProbeItems(
            texts=[item_texts[i] for i in items],
            codes=np.array([sids.items[i] for i in items]),
            level_names=[lv.name for lv in sids.levels],
            level_sizes=[lv.size for lv in sids.levels],
            codebooks=books,
        ),
        base_vocab_size=ext.base_vocab_size,
        permutations=g.structure_permutations,
        n_probe_items=g.probe_items,
        seed=g.seed,
    )


# Run settings a resumed run may change: how many processes, and what each one held.
NOT_FINGERPRINTED = ("grounding", "sids", "processes", "parameters_per_process")


def grounding_fingerprint(
    run_config: dict[str, object], sids_path: Path, g: GroundingConfig
) -> dict[str, object]:
    """What a resumed grounding run must share with the run that saved its state: the
    run's settings but the sids path (its content counts, by hash) and the grounding
    section, of which only the fingerprinted fields (gti.options)."""
    return {
        **{k: v for k, v in run_config.items() if k not in NOT_FINGERPRINTED},
        "sids_sha256": hashlib.sha256((sids_path / "semantic_ids.json").read_bytes()).hexdigest(),
        **{k: v for k, v in asdict(g).items() if k in fingerprinted(GroundingConfig)},
    }


def grounding_rows(
    model: PreTrainedModel, ext: VocabExtension, adapter_of: str | None
) -> tuple[NewRows, object | None]:
    """The trainable new rows of the frozen ``model``, and the ``PeftModel`` that holds
    them under ``--vehicle peft`` (``adapter_of``: the base the adapter names; None:
    ``--vehicle rows``, no PeftModel)."""
    freeze(model)
    if adapter_of is None:
        return NewRows(model, ext), None
    from gti.init.peft_rows import PeftRows, wrap

    peft_model = wrap(model, ext, adapter_of)
    return PeftRows(peft_model, ext), peft_model


def ground(
    model: PreTrainedModel,
    tokenizer: object,
    ext: VocabExtension,
    rows: NewRows,
    sids: SemanticIds,
    item_texts: dict[str, str],
    items: list[str],
    run_config: dict[str, object],
    cfg: InitConfig,
    *,
    should_stop: Callable[[int], bool] | None,
    group: Group = Group(),
    device: torch.device | None = None,
) -> tuple[TrainResult, dict[str, torch.Tensor] | None]:
    """Grounding (strategy ``gti``): train ``rows`` (:func:`grounding_rows`) of the frozen
    ``model`` on the text <-> SID pairs of ``items`` (those not held out), resuming from
    ``cfg.out``'s partial state, and write them back (into the model; under ``--vehicle
    peft`` they stay in the adapter).

    With ``--fsdp`` the model (on the CPU until then) is sharded onto ``device`` first, and
    the weights to save come back gathered on rank 0 (:mod:`gti.init.sharding`): the
    second value, None otherwise (the rows are then written into ``model``).
    Raises :class:`gti.errors.Interrupted` when it stopped early.
    """
    g = cfg.grounding
    if g.batch_size % group.world:
        raise InputError(
            "--batch-size",
            f"{g.batch_size} pairs per step do not split over {group.world} processes; "
            "pick a multiple",
        )
    if g.fsdp:
        rows.to(device)
        shard_backbone(model, group, device)  # type: ignore[arg-type]
        run_config["parameters_per_process"] = group.gather(local_parameters(model))
    stream = PairStream(
        tokenizer,
        [item_texts[i] for i in items],
        sid_strings(sids, items),
        rows.slot.cpu(),
        batch_size=g.batch_size,
        seed=g.seed,
        max_text_chars=g.max_text_chars,
        repeats=(g.text_to_sid_repeats, g.sid_to_text_repeats),
    )
    distill = distill_stream(
        tokenizer,
        stream.texts,
        stream.sid_strings,
        rows.slot.cpu(),
        g,  # type: ignore[arg-type]
    )
    sids_path = Path(cfg.sids)
    resume = GroundingState(
        partial_dir(Path(cfg.out)), grounding_fingerprint(run_config, sids_path, g)
    )
    probe = None
    if g.structure_every:
        codebooks = sids_path / CODEBOOKS_FILENAME
        with whole_root(model):  # under --fsdp: the probe reads the embedding
            probe = structure_probe(
                model, tokenizer, rows, sids, items, item_texts, codebooks, ext, g
            )
    pause = g.pause_after

    def stop(step: int) -> bool:
        return bool(pause and step >= pause) or (should_stop is not None and should_stop(step))

    result = train_grounding(
        model,
        rows,
        stream,
        g,
        distill=distill,
        resume=resume,
        should_stop=stop,
        probe=probe,
        group=group,
    )
    if not result.completed:
        raise Interrupted(result.step, str(resume.folder))
    if g.fsdp:
        return result, gathered_weights(model, rows)
    rows.write_back(model)
    return result, None


def run_init(cfg: InitConfig, *, should_stop: Callable[[int], bool] | None = None) -> Path:
    """Write the initialized checkpoint to ``cfg.out`` and return its path.

    Raises :class:`gti.errors.Interrupted` when grounding stopped early (signal or
    ``should_stop``); the same call later resumes where it stopped.
    """
    cfg.validate()
    if cfg.grounding.fsdp and launched_world() == 1:
        raise InputError(
            "--fsdp",
            "sharding needs several processes, and this is one: launch with torchrun "
            "--nproc_per_node N -m gti.cli init ... or accelerate launch --multi_gpu "
            "--num_processes N -m gti.cli init ...",
        )
    if cfg.grounding.fsdp and cfg.vehicle == "peft":
        raise InputError(
            "--fsdp",
            "not with --vehicle peft: the PEFT wrapper and FSDP2's sharding of the same "
            "layers are not supported together; use --vehicle rows (the default)",
        )
    out = Path(cfg.out)
    check_output_dir(out, CONFIG_FILENAME)
    sids_path = Path(cfg.sids)
    sids = load(sids_path)
    codebooks = sids_path / CODEBOOKS_FILENAME
    if not codebooks.is_file():
        raise InputError(codebooks, "file not found; pass the folder written by `gti sids build`")
    model_spec = cfg.model or str(sids.provenance.get("source_model") or DEFAULT_MODEL)
    data = cfg.data or str(sids.provenance.get("data") or DEFAULT_DATA)
    row_strategy = cfg.start_from if cfg.strategy == "gti" else cfg.strategy
    needs_texts = cfg.strategy == "gti" or "item_texts" in needs(row_strategy)
    item_texts = _item_texts(sids, data, cfg.cache_dir) if needs_texts else {}
    # Drawn as `gti probe` draws it again from init_config.json (gti.probe.source): over the
    # sidecar's items in order, with their token strings. Kept from grounding and from the
    # inits that read texts.
    held_out, grounded = split_holdout(
        list(sids.items), cfg.held_out_count(), cfg.seed, sid_tokens(sids)
    )
    held = set(held_out)
    item_texts = {i: t for i, t in item_texts.items() if i not in held}
    described = read_descriptions(cfg.descriptions) if cfg.descriptions else None

    backbone = resolve_backbone(
        model_spec, cache_dir=cfg.cache_dir, allow_download=cfg.allow_download, seed=cfg.seed
    )
    adapter_of = adapter_base(backbone) if cfg.vehicle == "peft" else None
    model, tokenizer = backbone.load()
    device = local_device(resolve_device(cfg.device))
    group = join(device) if cfg.strategy == "gti" else Group()
    sharding = cfg.strategy == "gti" and cfg.grounding.fsdp
    if not sharding:  # else each process moves only its shards (gti.init.sharding)
        model.to(device)
    base_tokenizer = base_tokenizer_for(tokenizer, row_strategy)
    ext = extend_vocabulary(model, tokenizer, sids, pad_to_multiple_of=cfg.pad_vocab_to_multiple_of)
    context = InitContext(
        sids=sids,
        item_texts=item_texts,
        tokenizer=tokenizer,
        new_tokens=sids.token_strings(),
        base_tokenizer=base_tokenizer,
        descriptions=described,
    )
    if "codebooks" in needs(row_strategy):
        books = read_codebooks(codebooks, sids, every_level=False)
        names = list(books)
        context.codebooks = list(books.values())
        context.row_codes = [
            (names.index(lv.name), code) if lv.name in books else None
            for lv in sids.levels
            for code in range(lv.size)
        ]
    generator = torch.Generator().manual_seed(cfg.seed)
    apply_row_init(model, ext, row_strategy, generator, context, cfg.norm_correct)

    run_config: dict[str, object] = {
        "strategy": cfg.strategy,
        "processes": group.world,
        "start_from": cfg.start_from if cfg.strategy == "gti" else None,
        **row_init_record(cfg),
        "model": backbone.name,
        "model_identity": backbone.identity,
        "data": data,
        "sids": str(sids_path),
        "seed": cfg.seed,
        "holdout": len(held_out),
        "grounding": asdict(cfg.grounding) if cfg.strategy == "gti" else None,
    }
    if cfg.vehicle != "rows":  # recorded where it differs: older runs' configs stay as they were
        run_config["vehicle"] = cfg.vehicle
    step, train_log, peft_model, weights = 0, None, None, None
    if cfg.strategy == "gti":
        rows, peft_model = grounding_rows(model, ext, adapter_of)
        result, weights = ground(
            model,
            tokenizer,
            ext,
            rows,
            sids,
            item_texts,
            grounded,
            run_config,
            cfg,
            should_stop=should_stop,
            group=group,
            device=device,
        )
        step, train_log = result.step, result.log

    final = with_token_ids(sids, ext)
    final.provenance = {
        "stage": "init",
        "init_strategy": cfg.strategy,
        "start_from": run_config["start_from"],
        **signature(cfg.strategy, cfg.start_from),
        "norm_correct": cfg.norm_correct,
        "step": step,
        "seed": cfg.seed,
        "source_model": backbone.name,
        "source_model_identity": backbone.identity,
        "data": data,
        "tied_embeddings": ext.tied,
        "base_embedding_rows": ext.base_rows,
        "sids_provenance": sids.provenance,
    }
    if adapter_of is not None:
        final.provenance["vehicle"] = cfg.vehicle
    if group.main:  # the rows are the same on every process
        write_checkpoint(
            out,
            model,
            tokenizer,
            final,
            codebooks,
            CONFIG_FILENAME,
            run_config,
            train_log,
            state_dict=weights,
            save_weights=None
            if peft_model is None
            else partial(save_adapter, peft_model=peft_model),
        )
        if cfg.strategy == "gti":
            GroundingState(partial_dir(out), {}).clear()
    group.barrier()
    log.info("wrote %s (%s, %d new tokens)", out, cfg.strategy, ext.n_new)
    return out
