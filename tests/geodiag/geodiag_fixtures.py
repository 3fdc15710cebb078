"""Tiny checkpoints written by the tests: config.json + safetensors + tokenizer.json (+ sidecar,
codebooks), with planted new-token geometries whose verdict is known in advance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from geodiag.io.formats.safetensors import save_file
from geodiag.io.vocabulary import sidecar

BASE_VOCAB = 300
DIM = 32
LEVELS = (("a", 8), ("b", 8), ("c", 8))
CODE_DIM = 6
# The SID token strings of LEVELS, in (level, code) order.
SID_NAMES = [sidecar.token_string(lv, c) for lv, k in LEVELS for c in range(k)]


def base_rows(seed: int = 0) -> np.ndarray:
    """Original vocabulary: anisotropic Gaussian with a shared offset, like real embeddings."""
    rng = np.random.default_rng(seed)
    scales = np.linspace(0.2, 0.02, DIM)
    return rng.normal(size=(BASE_VOCAB, DIM)) * scales + 0.01


def codebooks(seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.normal(size=(k, CODE_DIM)) for name, k in LEVELS}


def planted_new_rows(kind: str, base: np.ndarray, seed: int = 2) -> np.ndarray:
    """New rows (24, DIM) in (level, code) order for a named geometry."""
    rng = np.random.default_rng(seed)
    n = sum(k for _, k in LEVELS)
    mean = base.mean(axis=0)
    if kind == "mean":
        return np.tile(mean, (n, 1))
    if kind == "mean-noise":  # transformers' mean_resizing: N(mean, 1e-9 * Sigma)
        cov = np.cov(base, rowvar=False)
        return rng.multivariate_normal(mean, 1e-9 * cov, size=n)
    if kind == "line":
        direction = rng.normal(size=DIM)
        return np.outer(rng.normal(size=n), direction) * 0.1
    if kind == "random":
        return rng.normal(size=(n, DIM)) * base.std()
    if kind == "grounded":  # each level's codebook seen through a random linear map
        books = codebooks()
        out = []
        for name, _ in LEVELS:
            proj = rng.normal(size=(CODE_DIM, DIM)) * 0.1
            out.append(books[name] @ proj)
        rows = np.concatenate(out)
        return rows + rng.normal(size=rows.shape) * 0.005
    raise ValueError(kind)


def tokenizer_json(n_base: int, new_tokens: list[str], extra_special: int = 0) -> dict:
    vocab = {f"tok{i}": i for i in range(n_base)}
    vocab["Ġthe"] = 5  # a byte-level token, to check readable decoding
    del vocab["tok5"]
    added = [{"id": n_base + i, "content": t, "special": False} for i, t in enumerate(new_tokens)]
    added.insert(0, {"id": 0, "content": "<|endoftext|>", "special": True})
    return {
        "version": "1.0",
        "added_tokens": added,
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
        "decoder": {"type": "ByteLevel"},
    }


def write_checkpoint(
    root: Path,
    new_rows: np.ndarray,
    *,
    base: np.ndarray | None = None,
    with_sidecar: bool = True,
    with_tokenizer: bool = True,
    with_codebooks: bool = True,
    with_config: bool = True,
    sharded: bool = False,
    untied_head: np.ndarray | None = None,
    dtype: str | None = None,
    tensor_name: str = "model.embed_tokens.weight",
    provenance: dict | None = None,
) -> Path:
    """A save_pretrained-like folder; returns its path."""
    base = base_rows() if base is None else base
    root.mkdir(parents=True, exist_ok=True)
    emb = np.concatenate([base, new_rows]).astype(np.float32)
    layer = np.ones((DIM, DIM), np.float32)
    tensors = {tensor_name: emb, "model.layers.0.mlp.weight": layer}
    if untied_head is not None:
        tensors["lm_head.weight"] = untied_head.astype(np.float32)
    if sharded:
        head = {k: v for k, v in tensors.items() if k != "model.layers.0.mlp.weight"}
        save_file(head, root / "model-00001-of-00002.safetensors", dtype=dtype)
        save_file(
            {"model.layers.0.mlp.weight": layer},
            root / "model-00002-of-00002.safetensors",
            dtype=dtype,
        )
        weight_map = {k: "model-00001-of-00002.safetensors" for k in head}
        weight_map["model.layers.0.mlp.weight"] = "model-00002-of-00002.safetensors"
        (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    else:
        save_file(tensors, root / "model.safetensors", dtype=dtype)
    names = [sidecar.token_string(lv, c) for lv, k in LEVELS for c in range(k)]
    if with_config:
        config = {
            "model_type": "llama",
            "hidden_size": DIM,
            "vocab_size": len(emb),
            "tie_word_embeddings": untied_head is None,
        }
        (root / "config.json").write_text(json.dumps(config))
    if with_tokenizer:
        (root / "tokenizer.json").write_text(json.dumps(tokenizer_json(len(base), names)))
    if with_sidecar:
        levels, next_id = [], len(base)
        for name, k in LEVELS:
            levels.append(sidecar.Level(name, k, list(range(next_id, next_id + k))))
            next_id += k
        rng = np.random.default_rng(3)
        items = {f"item{i}": [int(rng.integers(k)) for _, k in LEVELS] for i in range(10)}
        prov = provenance or {"init_strategy": "test", "stage": "init", "step": 0, "seed": 0}
        sidecar.save(sidecar.SemanticIds(len(base), levels, items, prov), root)
    if with_codebooks:
        save_file(codebooks(), root / sidecar.CODEBOOKS_FILENAME)
    return root


# Names a checkpoint's maker controls, each aimed at one output: a forged GitHub annotation
# (alone on a line, after an indent, in the legacy ``##[`` form, percent-encoded), terminal
# escapes, markdown and HTML markup, characters XML 1.0 forbids, a lone surrogate (UTF-8
# cannot encode it) and a bidi override. The first five are the metrics table's neighbour
# lines, which start with the token.
HOSTILE_TOKENS = (
    "::error::NEIGHBOR",
    "<a_0>\n::error file=x,line=1::INJECTED",
    "<a_1>\x1b[2J",
    "<a_2>|<b>x</b>",
    "<a_3>\x00\x0b",
    "<a_4>\ud800\u202e",
    "<a_5>##[warning]LEGACY",
    "<a_6>%0A::add-mask::x`",
)
# Level names head lines of the metrics table, name the RSA checks (annotation titles,
# JUnit names, markdown cells) and, through ``<level_code>``, every token of the level.
HOSTILE_LEVELS = (
    "a\n::warning::LEVEL",
    "::stop-commands::b",
    "c|<i>x</i>,d:`e`\x1b[2J$\\notacommand$",  # and mathtext, for the report's figures
)


def write_hostile_tokenizer_checkpoint(root: Path, kind: str = "mean") -> Path:
    """No sidecar: the new tokens are tokenizer.json's added tokens, the first of them
    :data:`HOSTILE_TOKENS`. ``mean`` rows fail the gate and list the tokens as untrained."""
    base = base_rows()
    write_checkpoint(
        root, planted_new_rows(kind, base), base=base, with_sidecar=False, with_codebooks=False
    )
    n_new = sum(k for _, k in LEVELS)
    names = [*HOSTILE_TOKENS, *(f"<t_{i}>" for i in range(len(HOSTILE_TOKENS), n_new))]
    (root / "tokenizer.json").write_text(json.dumps(tokenizer_json(len(base), names)))
    return root


def write_hostile_sidecar_checkpoint(root: Path, kind: str = "mean") -> Path:
    """A sidecar whose level names are :data:`HOSTILE_LEVELS` (so are the codebooks'
    tensor names, and the tokens are ``<level_code>``), and whose provenance keys would
    start lines of the metrics table as workflow commands."""
    base = base_rows()
    write_checkpoint(
        root, planted_new_rows(kind, base), base=base, with_sidecar=False, with_codebooks=False
    )
    sizes = [k for _, k in LEVELS]
    levels, next_id = [], len(base)
    for name, k in zip(HOSTILE_LEVELS, sizes, strict=True):
        levels.append(sidecar.Level(name, k, list(range(next_id, next_id + k))))
        next_id += k
    rng = np.random.default_rng(3)
    items = {f"item{i}": [int(rng.integers(k)) for k in sizes] for i in range(10)}
    provenance = {
        "init_strategy": "mean\x1b[31m",
        "stage": "init",
        "::add-mask::p_provenance": {"::error::q": 1},
    }
    sids = sidecar.SemanticIds(len(base), levels, items, provenance)
    sidecar.save(sids, root)
    (root / "tokenizer.json").write_text(
        json.dumps(tokenizer_json(len(base), sids.token_strings()))
    )
    books = codebooks()
    save_file(
        {lv: books[name] for lv, (name, _) in zip(HOSTILE_LEVELS, LEVELS, strict=True)},
        root / sidecar.CODEBOOKS_FILENAME,
    )
    return root


def write_gguf(
    path: Path,
    emb: np.ndarray,
    *,
    qtype: str = "F32",
    head: np.ndarray | None = None,
    tokens: list[str] | None = None,
    types: list[int] | None = None,
    raw: dict[str, tuple[np.ndarray, int]] | None = None,
) -> Path:
    """A llama-arch GGUF with ``token_embd.weight`` (and ``output.weight``) as ``qtype``;
    tokens default to tok0.. plus the SID names, typed NORMAL / USER_DEFINED, with one
    CONTROL token at 0. Written by llama.cpp's gguf-py (imported here: the ``gguf`` extra)."""
    import gguf

    Q = gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_embedding_length(emb.shape[1])
    w.add_tokenizer_model("gpt2")
    n_new = len(emb) - BASE_VOCAB
    if tokens is None:
        tokens = ["<|endoftext|>", *(f"tok{i}" for i in range(1, BASE_VOCAB)), *SID_NAMES[:n_new]]
    if types is None:
        types = [3] + [1] * (BASE_VOCAB - 1) + [4] * n_new
    w.add_token_list(tokens)
    w.add_token_types(types)
    for name, m in (("token_embd.weight", emb), ("output.weight", head)):
        if m is None:
            continue
        t = Q[qtype]
        data = m.astype(np.float32)
        if t == Q.F16:
            w.add_tensor(name, data.astype(np.float16))
        elif t == Q.F32:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, gguf.quants.quantize(data, t), raw_dtype=t)
    for name, (data, type_id) in (raw or {}).items():
        w.add_tensor(name, data, raw_dtype=Q(type_id))
    w.add_tensor("output_norm.weight", np.ones(emb.shape[1], np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def one_line_exit_2(res) -> str:
    """The one ``error: ...`` line of a command that stopped on bad input (a CliRunner
    result): exit 2, nothing else on stderr, no traceback."""
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.output
    return lines[0]
