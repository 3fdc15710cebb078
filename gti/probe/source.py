"""What ``gti probe`` probes: the checkpoint's SID index, its item texts, the items to ask
about, and the prompts, found from the checkpoint's own files unless ``--sids``/``--items``
name others.

- A gti checkpoint (``semantic_ids.json`` with token ids): the sidecar's SIDs, the texts of
  the dataset they were built from, and the items ``gti init --holdout N`` held out (drawn
  again as below). By default it grounds on every item and records none: the probe then
  asks about a seeded sample and says so.
- A drop-in output (``gti init --sids INDEX --items ITEMS``, ``gti_sid_source.json``): the
  index and item file it recorded, and its held-out items, drawn again from the
  ``holdout`` and ``seed`` of its ``init_config.json`` (``gti.dropin.run.split_holdout``).
- ``--sids INDEX --items ITEMS``: any framework's files, read by geodiag's readers
  (``gti.dropin.index``, ``gti.dropin.items``); held out as above when they are the files
  the checkpoint's drop-in run recorded, else a seeded sample.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.escape import terminal
from gti.checkpoint_files import INIT_CONFIG_FILENAME
from gti.dropin.files import SOURCE_FILENAME
from gti.dropin.index import IndexTokens, read_index
from gti.dropin.run import texts_of
from gti.init.config import GroundingConfig, InitConfig
from gti.init.holdout import split_holdout
from gti.probe.config import ProbeConfig
from gti.prompts import SID_TO_TEXT, TEXT_TO_SID


@dataclass
class ProbeSource:
    index: IndexTokens
    texts: dict[str, str]  # item -> text, every index item that has one
    items: list[str]  # the items asked about
    held_out: bool  # True: grounding never saw them
    how: str  # where the items come from, one sentence
    text_to_sid: str  # the text -> SID prompt (the run's first template)
    sid_to_text: str  # the SID -> text prompt (the run's first template)
    max_text_chars: int  # texts cut as grounding cut them


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(path, f"cannot read it as JSON ({e})") from None
    if not isinstance(data, dict):
        raise InputError(path, "expected a JSON object")
    return data


def _sidecar_index(ckpt: Path) -> IndexTokens:
    """gti's own SIDs as an index: item -> its token strings, level by level."""
    from geodiag.io.vocabulary.sidecar import load

    sids = load(ckpt)
    if not sids.has_token_ids:
        raise InputError(
            ckpt / "semantic_ids.json",
            "records no token ids (a `gti sids build` folder, not a checkpoint); "
            "pass the checkpoint `gti init` wrote",
        )
    items = {
        item: tuple(lv.token(c) for lv, c in zip(sids.levels, codes, strict=True))
        for item, codes in sids.items.items()
    }
    codes = {lv.token(c): (k, c) for k, lv in enumerate(sids.levels) for c in range(lv.size)}
    return IndexTokens(path=ckpt / "semantic_ids.json", items=items, codes=codes)


def _dataset_texts(ckpt: Path, index: IndexTokens, cfg: ProbeConfig) -> dict[str, str]:
    from geodiag.io.vocabulary.sidecar import load
    from gti.data.sources import load_dataset
    from gti.data.tasks import dataset_of

    data = dataset_of(load(ckpt), cfg.data, ckpt)
    catalog = load_dataset(data, cfg.cache_dir).catalog
    texts = {i: catalog.items[catalog.index(i)].text for i in index.items if i in catalog}
    if len(texts) < len(index.items):
        raise InputError(
            "--data",
            f"{len(index.items) - len(texts)} item(s) of {ckpt}'s SIDs are not in {data!r}; "
            "pass the --data the SIDs were built from",
        )
    return texts


def _must_exist(path: Path, flag: str) -> Path:
    if not path.exists():
        raise InputError(flag, f"{terminal(str(path))}: file not found")
    return path


def _same_file(a: str | Path | None, b: str | Path | None) -> bool:
    return a is not None and b is not None and Path(a).resolve() == Path(b).resolve()


def resolve_source(cfg: ProbeConfig) -> ProbeSource:
    """The index, texts and items ``cfg`` asks about (bad input: :class:`InputError`)."""
    ckpt = Path(cfg.checkpoint)
    if not ckpt.is_dir():
        raise InputError("CKPT", f"{terminal(str(ckpt))}: not a checkpoint folder")
    run = _json(ckpt / INIT_CONFIG_FILENAME) if (ckpt / INIT_CONFIG_FILENAME).is_file() else {}
    recorded = _json(ckpt / SOURCE_FILENAME) if (ckpt / SOURCE_FILENAME).is_file() else None
    if (cfg.sids is None) != (cfg.items is None):
        given, missing = ("--sids", "--items") if cfg.items is None else ("--items", "--sids")
        raise InputError(missing, f"{given} needs {missing}: the probe reads both files")

    text_fields = cfg.text_fields
    if cfg.sids is not None:
        sids_file, items_file = _must_exist(cfg.sids, "--sids"), _must_exist(cfg.items, "--items")
    elif recorded is not None:  # a drop-in output: the files its run read
        sids_file = _must_exist(Path(recorded["sids"]), "--sids")
        items_file = _must_exist(Path(recorded["items"]), "--items")
        text_fields = text_fields or run.get("text_fields")
    elif (ckpt / "semantic_ids.json").is_file():
        sids_file = items_file = None
    else:
        raise InputError(
            "CKPT",
            f"{terminal(str(ckpt))} holds neither semantic_ids.json nor {SOURCE_FILENAME}; "
            "pass its SID map and item texts with --sids INDEX --items ITEMS",
        )

    if sids_file is None:
        index = _sidecar_index(ckpt)
        texts = _dataset_texts(ckpt, index, cfg)
    else:
        index = read_index(sids_file, None, cfg.sid_offset)
        texts = texts_of(
            index, InitConfig(sids=sids_file, items=items_file, text_fields=text_fields)
        )

    same_run = (
        recorded is not None
        and run.get("route") == "drop-in"
        and _same_file(sids_file, recorded.get("sids"))
        and _same_file(items_file, recorded.get("items"))
    ) or (sids_file is None and run.get("route") is None)  # gti's own SIDs, as it ran
    if same_run and int(run.get("holdout") or 0) > 0:
        # drawn as the run drew it (gti.init.holdout): with the index's tokens
        items, _ = split_holdout(
            list(texts), int(run["holdout"]), int(run.get("seed", 0)), index.items
        )
        held_out = True
        how = (
            f"the {len(items)} items its grounding held out (init_config.json: holdout "
            f"{run['holdout']}, seed {run.get('seed', 0)})"
        )
    else:
        pool = list(texts)
        n = min(cfg.sample, len(pool))
        chosen = np.sort(np.random.default_rng(cfg.seed).choice(len(pool), n, replace=False))
        items = [pool[k] for k in chosen]
        held_out = False
        how = (
            f"the checkpoint records no held-out set: a seeded sample (seed {cfg.seed}) of "
            f"{n} of its {len(pool)} items, which grounding may have trained on"
        )
    if len(items) < 2:
        raise InputError("--sids", f"{len(items)} item(s) to probe; the probe needs at least 2")

    templates = run.get("templates") or {}
    grounding = run.get("grounding") or {}
    return ProbeSource(
        index=index,
        texts=texts,
        items=items,
        held_out=held_out,
        how=how,
        text_to_sid=(templates.get("text_to_sid") or TEXT_TO_SID)[0],
        sid_to_text=(templates.get("sid_to_text") or SID_TO_TEXT)[0],
        max_text_chars=int(grounding.get("max_text_chars") or GroundingConfig().max_text_chars),
    )


def check_tokens(index: IndexTokens, tokenizer, n_rows: int, where: Path) -> None:
    """Every token of the index is one token of ``tokenizer`` with an embedding row."""
    ids = tokenizer.convert_tokens_to_ids(index.tokens)
    unk = tokenizer.unk_token_id
    bad = [
        t for t, i in zip(index.tokens, ids, strict=True) if i is None or i == unk or i >= n_rows
    ]
    if bad:
        raise InputError(
            "--sids",
            f"{len(bad)} of the index's {len(index.tokens)} tokens are not tokens of "
            f"{terminal(str(where))} (e.g. {terminal(bad[0])}); pass the SID map the "
            "checkpoint was made with",
        )
