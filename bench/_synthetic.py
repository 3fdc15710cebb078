"""Synthetic checkpoints with planted new-token geometry, for the benchmark and the example report.

Every checkpoint of one :class:`Spec` shares the same original vocabulary and RQ-VAE
codebooks (all drawn from ``spec.seed``), so checkpoints of different strategies and
stages are comparable, and ``<strategy>/init`` -> ``<strategy>/sft`` pairs share their
new tokens (drift). The geometries follow the README's table and the paper's findings:

- ``mean``: every new row is the mean of the vocabulary (Hewitt init);
  after "SFT" a low-rank update spreads them a little, without the codebook's structure.
- ``mean-noise``: mean + N(0, 1e-9 Sigma) (transformers' ``mean_resizing``).
- ``line``: multiples of one direction.
- ``random``: N(0, sigma^2), sigma matched to the vocabulary.
- ``gti``: each level's codebook seen through a random linear map (grounded), scaled to
  the vocabulary's spread; "SFT" adds noise that keeps most of the structure.

Not a simulation of training: a fixture whose verdicts are known in advance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geodiag.io.formats.safetensors import save_file
from geodiag.io.vocabulary import sidecar

STRATEGIES = ("mean", "mean-noise", "line", "random", "gti")


@dataclass(frozen=True)
class Spec:
    levels: tuple[tuple[str, int], ...] = (("a", 8), ("b", 8), ("c", 8))
    dim: int = 32
    base_vocab: int = 300
    code_dim: int = 6
    seed: int = 0

    @property
    def n_new(self) -> int:
        return sum(k for _, k in self.levels)


def base_rows(spec: Spec) -> np.ndarray:
    """Original vocabulary (base_vocab, dim): anisotropic Gaussian with a shared offset."""
    rng = np.random.default_rng(spec.seed)
    scales = np.linspace(0.2, 0.02, spec.dim)
    offset = rng.normal(size=spec.dim) * 0.02
    return rng.normal(size=(spec.base_vocab, spec.dim)) * scales + offset


def codebooks(spec: Spec) -> dict[str, np.ndarray]:
    """One [codes, code_dim] codebook per level, clustered like a trained RQ-VAE's."""
    rng = np.random.default_rng(spec.seed + 1)
    books = {}
    for name, k in spec.levels:
        centers = rng.normal(size=(max(2, k // 4), spec.code_dim)) * 2.0
        books[name] = centers[rng.integers(len(centers), size=k)] + rng.normal(
            size=(k, spec.code_dim)
        )
    return books


def _spread(x: np.ndarray) -> float:
    return float(np.sqrt(((x - x.mean(axis=0)) ** 2).sum(axis=1).mean()))


def init_rows(strategy: str, spec: Spec) -> np.ndarray:
    """New rows (n_new, dim) in (level, code) order, right after initialization."""
    base = base_rows(spec)
    rng = np.random.default_rng(spec.seed + 2)
    n, mean = spec.n_new, base.mean(axis=0)
    if strategy == "mean":
        return np.tile(mean, (n, 1))
    if strategy == "mean-noise":
        return rng.multivariate_normal(mean, 1e-9 * np.cov(base, rowvar=False), size=n)
    if strategy == "line":
        return np.outer(rng.normal(size=n), rng.normal(size=spec.dim)) * 0.1
    if strategy == "random":
        return rng.normal(size=(n, spec.dim)) * base.std()
    if strategy == "gti":
        books = codebooks(spec)
        rows = np.concatenate(
            [books[name] @ rng.normal(size=(spec.code_dim, spec.dim)) for name, _ in spec.levels]
        )
        rows *= _spread(base) / _spread(rows)
        return rows + mean
    raise ValueError(f"unknown strategy {strategy!r}; one of {STRATEGIES}")


def sft_rows(strategy: str, spec: Spec) -> np.ndarray:
    """The same rows after a stand-in for SFT: what the paper reports, qualitatively."""
    rows = init_rows(strategy, spec)
    base = base_rows(spec)
    rng = np.random.default_rng(spec.seed + 3)
    sigma = base.std()
    if strategy.startswith("mean"):  # a few shared directions learned: low effective rank
        update = rng.normal(size=(spec.n_new, 3)) @ rng.normal(size=(3, spec.dim))
        return rows + update * sigma * 0.4 + rng.normal(size=rows.shape) * sigma * 0.02
    return rows + rng.normal(size=rows.shape) * sigma * 0.5


def tokenizer_json(spec: Spec) -> dict:
    vocab = {f"tok{i}": i for i in range(spec.base_vocab)}
    added = [{"id": 0, "content": "<|endoftext|>", "special": True}]
    names = [sidecar.token_string(name, c) for name, k in spec.levels for c in range(k)]
    added += [
        {"id": spec.base_vocab + i, "content": t, "special": False} for i, t in enumerate(names)
    ]
    return {
        "version": "1.0",
        "added_tokens": added,
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
    }


def write_synthetic(
    root: Path,
    strategy: str,
    stage: str = "init",
    spec: Spec = Spec(),
    init_checkpoint: str | None = None,
) -> Path:
    """A save_pretrained-like folder with sidecar and codebooks; returns ``root``.
    ``init_checkpoint``: the init an sft stage names in its sidecar (relative to ``root``,
    as ``gti sft`` writes it), so that a report pairs the two."""
    if stage not in ("init", "sft"):
        raise ValueError(f"stage must be 'init' or 'sft', got {stage!r}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    new = init_rows(strategy, spec) if stage == "init" else sft_rows(strategy, spec)
    emb = np.concatenate([base_rows(spec), new]).astype(np.float32)  # (base_vocab + n_new, dim)
    save_file({"model.embed_tokens.weight": emb}, root / "model.safetensors")
    config = {
        "model_type": "llama",
        "hidden_size": spec.dim,
        "vocab_size": len(emb),
        "tie_word_embeddings": True,
    }
    (root / "config.json").write_text(json.dumps(config))
    (root / "tokenizer.json").write_text(json.dumps(tokenizer_json(spec)))
    levels, next_id = [], spec.base_vocab
    for name, k in spec.levels:
        levels.append(sidecar.Level(name, k, list(range(next_id, next_id + k))))
        next_id += k
    rng = np.random.default_rng(spec.seed + 4)
    items = {f"item{i}": [int(rng.integers(k)) for _, k in spec.levels] for i in range(20)}
    provenance = {
        "init_strategy": strategy,
        "stage": stage,
        "step": 0 if stage == "init" else 1000,
        "seed": spec.seed,
        "source_model": "synthetic (bench/_synthetic.py)",
    }
    if init_checkpoint is not None:
        provenance[sidecar.INIT_CHECKPOINT] = init_checkpoint
    sidecar.save(sidecar.SemanticIds(spec.base_vocab, levels, items, provenance), root)
    save_file(codebooks(spec), root / sidecar.CODEBOOKS_FILENAME)
    return root
