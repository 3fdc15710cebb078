"""Content embeddings of item texts: what the RQ-VAE quantizes.

Two encoders:
- ``lm``: mean of the backbone's last hidden states over the text's tokens
  (padding masked out). Cached on disk per (backbone identity, sha256 of the
  text), so a re-run, or a catalog that grew by a few items, encodes only what
  is new.
- ``bow``: a hashed bag of words (signed feature hashing, L2-normalized). No model,
  deterministic, and it carries exactly the word overlap that the synthetic
  catalog plants: the semantic-ID tests use it to check the hierarchy is recovered
  without depending on what a random tiny LM happens to encode.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

import numpy as np

from geodiag.atomic import atomic_path
from gti.cache import cache_root
from gti.models.backbone import Backbone

CACHE_VERSION = "meanpool-v1"  # bump when the pooling changes: old caches are ignored

log = logging.getLogger(__name__)


def text_digests(texts: list[str]) -> np.ndarray:
    """sha256 of each text, as a (n, 32) uint8 array (the cache's key column)."""
    return np.frombuffer(
        b"".join(hashlib.sha256(t.encode("utf-8")).digest() for t in texts), dtype=np.uint8
    ).reshape(len(texts), 32)


def cache_path(identity: str, max_length: int, cache_dir: str | Path | None = None) -> Path:
    key = hashlib.sha256(f"{CACHE_VERSION}:{identity}:max_length={max_length}".encode()).hexdigest()
    return cache_root(cache_dir) / "embeddings" / f"{key[:32]}.safetensors"


def _read_cache(path: Path) -> dict[bytes, np.ndarray]:
    from safetensors.numpy import load_file

    if not path.is_file():
        return {}
    try:
        data = load_file(path)
    except Exception as e:  # a torn or foreign file: recompute rather than fail
        log.warning("ignoring unreadable embedding cache %s (%s)", path, e)
        return {}
    return {d.tobytes(): v for d, v in zip(data["sha256"], data["vectors"], strict=True)}


def _write_cache(path: Path, table: dict[bytes, np.ndarray], identity: str) -> None:
    from safetensors.numpy import save_file

    keys = sorted(table)
    tensors = {
        "sha256": np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32),
        "vectors": np.stack([table[k] for k in keys]).astype(np.float32),
    }
    with atomic_path(path) as tmp:
        save_file(tensors, tmp, metadata={"identity": identity, "version": CACHE_VERSION})


def mean_pool_texts(
    texts: list[str],
    model,
    tokenizer,
    *,
    batch_size: int = 64,
    max_length: int = 256,
    progress: bool = True,
) -> np.ndarray:
    """(n, hidden) float32: attention-masked mean of the last hidden state per text."""
    import torch
    from tqdm import tqdm

    ids = tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    # Longest first: similar lengths share a batch (little padding), and the
    # slowest batch shows up at once in the progress bar's estimate.
    order = sorted(range(len(texts)), key=lambda i: -len(ids[i]))
    out = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
    body = model.base_model  # skip the LM head: only hidden states are needed
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    with torch.inference_mode():
        for batch in tqdm(batches, desc="encoding items", unit="batch", disable=not progress):
            width = max(1, max(len(ids[i]) for i in batch))
            input_ids = torch.zeros(len(batch), width, dtype=torch.long)  # pad id is masked out
            mask = torch.zeros(len(batch), width, dtype=torch.long)
            for row, i in enumerate(batch):
                input_ids[row, : len(ids[i])] = torch.tensor(ids[i])
                mask[row, : len(ids[i])] = 1
            hidden = body(input_ids=input_ids, attention_mask=mask).last_hidden_state  # (B, T, d)
            m = mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1)  # (B, d)
            out[batch] = pooled.float().numpy()
    return out


def lm_embeddings(
    texts: list[str],
    backbone: Backbone,
    *,
    batch_size: int = 64,
    max_length: int = 256,
    cache_dir: str | Path | None = None,
    progress: bool = True,
) -> tuple[np.ndarray, int]:
    """Embeddings of ``texts`` (n, hidden) and how many had to be computed (0 = all cached)."""
    path = cache_path(backbone.identity, max_length, cache_dir)
    table = _read_cache(path)
    digests = [d.tobytes() for d in text_digests(texts)]
    missing = sorted({d: t for d, t in zip(digests, texts, strict=True) if d not in table}.items())
    if missing:
        n_cached = sum(d in table for d in digests)
        log.info(
            "encoding %d distinct texts with %s (%d of %d items cached)",
            len(missing),
            backbone.name,
            n_cached,
            len(texts),
        )
        model, tokenizer = backbone.load()
        vectors = mean_pool_texts(
            [t for _, t in missing],
            model,
            tokenizer,
            batch_size=batch_size,
            max_length=max_length,
            progress=progress,
        )
        table.update({d: v for (d, _), v in zip(missing, vectors, strict=True)})
        _write_cache(path, table, backbone.identity)
    return np.stack([table[d] for d in digests]), len(missing)


def bow_embeddings(texts: list[str], dim: int = 512) -> np.ndarray:
    """(n, dim) float32 hashed bag of words; a stable hash (blake2b), not Python's salted one."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            out[row, h % dim] += 1.0 if (h >> 63) & 1 else -1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.maximum(norms, 1e-12)
