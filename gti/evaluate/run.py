"""``run_evaluate``: the library entry behind ``gti evaluate``.

checkpoint -> its SIDs' dataset -> leave-one-out validation/test users -> prompts
-> ranked items (trie beam search or exact scoring) -> Recall@K, NDCG@K.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

from geodiag.atomic import atomic_write
from geodiag.errors import InputError
from geodiag.io.vocabulary.sidecar import load
from geodiag.jsonio import dumps
from gti.checkpoint_files import SFT_CONFIG_FILENAME
from gti.data.tasks import dataset_of, load_task_data, of_users, sample_users
from gti.evaluate.config import EvalConfig
from gti.evaluate.decode import rank_items
from gti.evaluate.layout import layout_of, next_item_prompts
from gti.evaluate.metrics import topk_metrics
from gti.evaluate.trie import SidTrie
from gti.options import PROMPT_DEFAULTS
from gti.prompts import pad_id_of
from gti.training import resolve_device

log = logging.getLogger(__name__)


@dataclass
class SplitResult:
    n_users: int
    metrics: dict[str, float]  # "recall@K" / "ndcg@K"
    seconds: float
    users_per_s: float


@dataclass
class EvalResult:
    checkpoint: str
    method: str  # "beam" | "exact"
    beams: int
    ks: list[int]
    splits: dict[str, SplitResult]
    settings: dict[str, object]  # data, prompt settings, catalog size, sampling
    provenance: dict[str, object] = field(default_factory=dict)  # the checkpoint's sidecar
    format: str = "gti.evaluate"
    format_version: int = 1


def prompt_settings(cfg: EvalConfig) -> dict[str, object]:
    """k_core / max_history / titles / system_prompt: flags, else the checkpoint's SFT run, else SFT defaults."""
    trained: dict[str, object] = {}
    path = Path(cfg.checkpoint) / SFT_CONFIG_FILENAME
    if path.is_file():
        trained = json.loads(path.read_text())
    out: dict[str, object] = {}
    for name in PROMPT_DEFAULTS:
        given = getattr(cfg, name)
        out[name] = given if given is not None else trained.get(name, PROMPT_DEFAULTS[name])
    return out


def run_evaluate(cfg: EvalConfig) -> EvalResult:
    cfg.validate()
    ckpt = Path(cfg.checkpoint)
    sids = load(ckpt)
    if not sids.has_token_ids:
        raise InputError(ckpt, "semantic_ids.json records no token ids; pass a gti checkpoint")
    data = dataset_of(sids, cfg.data, ckpt)
    prompt = prompt_settings(cfg)
    task = load_task_data(
        sids,
        data,
        k_core_min=int(prompt["k_core"]),  # type: ignore[arg-type]
        max_history=int(prompt["max_history"]),  # type: ignore[arg-type]
        cache_dir=cfg.cache_dir,
    )
    tokenizer = AutoTokenizer.from_pretrained(ckpt, local_files_only=True)
    dtype = getattr(torch, cfg.dtype)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype, local_files_only=True)
    model.to(resolve_device(cfg.device)).eval()
    pad_id = pad_id_of(tokenizer)
    trie = SidTrie.build(sids)
    index = {item: i for i, item in enumerate(trie.item_ids)}

    users = sample_users(task, cfg.max_users, cfg.seed)
    # The layout the checkpoint was trained on; titles and system turn as resolved above.
    layout = replace(
        layout_of(ckpt), titles=bool(prompt["titles"]), system=str(prompt["system_prompt"])
    )

    results = {}
    for split in cfg.splits:
        examples = of_users(getattr(task.splits, split), users)
        prompts = next_item_prompts(tokenizer, task, examples, layout)
        targets = np.array([index[e.target] for e in examples])
        t0 = time.perf_counter()
        with tqdm(
            total=len(prompts), desc=f"eval {split}", unit="user", disable=not cfg.progress
        ) as bar:
            ranking = rank_items(
                model,
                prompts,
                trie,
                beams=cfg.beams,
                pad_id=pad_id,
                batch_size=cfg.batch_size,
                exact=cfg.exact,
                on_batch=bar.update,
            )
        seconds = time.perf_counter() - t0
        metrics = topk_metrics(ranking.items.numpy(), targets, tuple(cfg.ks))
        results[split] = SplitResult(
            len(prompts), metrics, round(seconds, 3), len(prompts) / seconds
        )
        log.info("%s %s: %s", ckpt, split, {k: round(v, 4) for k, v in metrics.items()})

    result = EvalResult(
        checkpoint=str(ckpt),
        method="exact" if cfg.exact else "beam",
        beams=cfg.beams,
        ks=list(cfg.ks),
        splits=results,
        settings={
            "data": data,
            **prompt,
            "prompt_layout": layout.settings(),
            "n_items": trie.n_items,
            "max_users": cfg.max_users,
            "seed": cfg.seed,
            "batch_size": cfg.batch_size,
            "device": str(model.device),
        },
        provenance=dict(sids.provenance),
    )
    if cfg.out is not None:
        write_json(Path(cfg.out), result)
    return result


def write_json(path: Path, result: EvalResult) -> None:
    """Temporary sibling + rename: a reader never sees half a file."""
    atomic_write(path, dumps(result) + "\n")


def load_result(path: Path) -> dict[str, object]:
    """An evaluation JSON as a dict (for tables); checks its format."""
    data = json.loads(Path(path).read_text())
    if data.get("format") != "gti.evaluate":
        raise InputError(path, "not a gti evaluation result")
    return data
