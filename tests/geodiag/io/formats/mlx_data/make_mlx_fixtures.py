"""Write the MLX fixtures of ``tests/geodiag/io/formats/test_mlx_quantized.py`` with mlx itself.

Run from the repository root, in an environment with mlx and mlx-lm (Linux CPU wheels:
``pip install "mlx[cpu]" mlx-lm``; these were made with mlx 0.32.4, mlx-lm 0.32.2):

    PYTHONPATH=. python tests/geodiag/io/formats/mlx_data/make_mlx_fixtures.py

It writes, next to itself:

- ``golden/``: ``mx.quantize`` of seeded rows for every affine bits (2, 3, 4, 5, 6, 8),
  group size (32, 64, 128) and scales dtype (F16, BF16; F32 at group 64), saved by
  ``mx.save_safetensors`` with ``mx.dequantize``'s result beside each (``<case>.expected``);
  its config.json names each case's parameters as per-module entries, as mlx-lm does;
- ``mlx_q4_random/``, ``mlx_q3_mean/``: ``mlx_lm.convert -q`` of a one-layer Llama
  (hidden 64, 300 original tokens + 24 added ``<a_0>``..``<c_7>``) whose new rows are
  random (4-bit, group 64, BF16) or the mean of the original rows (3-bit, group 32, F16);
- ``full_precision/``: the random model as it was given to mlx-lm, only its embedding
  kept (all geodiag reads; the layers would triple the size);
- ``expected.safetensors``: ``mx.dequantize`` of rows ``EXPECTED_ROWS`` of each converted
  embedding.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm import convert
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

from geodiag.io.formats.safetensors import save_file

HERE = Path(__file__).resolve().parent
HIDDEN, INTERMEDIATE, BASE_VOCAB = 64, 64, 300
NEW_TOKENS = [f"<{level}_{code}>" for level in "abc" for code in range(8)]
EXPECTED_ROWS = [*range(8), *range(BASE_VOCAB, BASE_VOCAB + len(NEW_TOKENS))]
MX_DTYPES = {"F16": mx.float16, "BF16": mx.bfloat16, "F32": mx.float32}
CONVERTED = {  # folder: (new rows, bits, group size, model dtype)
    "mlx_q4_random": ("random", 4, 64, "bfloat16"),
    "mlx_q3_mean": ("mean", 3, 32, "float16"),
}


def golden(out: Path) -> None:
    rng = np.random.default_rng(0)
    tensors, quantization = {}, {"group_size": 64, "bits": 4, "mode": "affine"}
    for dtype in ("F16", "BF16", "F32"):
        for bits in (2, 3, 4, 5, 6, 8):
            for group in (32, 64, 128) if dtype != "F32" else (64,):
                case = f"b{bits}_g{group}_{dtype.lower()}"
                w = rng.normal(size=(1, 128)) * 0.05
                w[0, :4] = (0.0, -0.2, 0.2, 1e-4)  # edges of a group, and a value near 0
                w = mx.array(w.astype(np.float32)).astype(MX_DTYPES[dtype])
                q, s, b = mx.quantize(w, group_size=group, bits=bits)
                tensors |= {f"{case}.weight": q, f"{case}.scales": s, f"{case}.biases": b}
                tensors[f"{case}.expected"] = mx.dequantize(q, s, b, group_size=group, bits=bits)
                quantization[case] = {"group_size": group, "bits": bits, "mode": "affine"}
    out.mkdir(exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), tensors, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps({"quantization": quantization}, indent=1))


def tiny_llama(folder: Path, new_rows: str, dtype: str) -> None:
    """A one-layer Llama save_pretrained folder, in ``dtype``, from seeded numpy rows."""
    rng = np.random.default_rng(0)
    base = rng.normal(size=(BASE_VOCAB, HIDDEN)) * np.linspace(0.2, 0.02, HIDDEN) + 0.01
    n_new = len(NEW_TOKENS)
    if new_rows == "mean":
        new = np.tile(base.mean(axis=0), (n_new, 1))
    else:
        new = rng.normal(size=(n_new, HIDDEN)) * base.std()
    t = {"model.embed_tokens.weight": np.concatenate([base, new])}
    for name in ("q", "k", "v", "o"):
        t[f"model.layers.0.self_attn.{name}_proj.weight"] = rng.normal(size=(HIDDEN, HIDDEN))
    for name, shape in (("gate", (INTERMEDIATE, HIDDEN)), ("up", (INTERMEDIATE, HIDDEN))):
        t[f"model.layers.0.mlp.{name}_proj.weight"] = rng.normal(size=shape)
    t["model.layers.0.mlp.down_proj.weight"] = rng.normal(size=(HIDDEN, INTERMEDIATE))
    t = {k: v * (0.05 if "layers" in k else 1.0) for k, v in t.items()}
    for norm in ("model.norm", "model.layers.0.input_layernorm"):
        t[f"{norm}.weight"] = np.ones(HIDDEN)
    t["model.layers.0.post_attention_layernorm.weight"] = np.ones(HIDDEN)
    stored = "BF16" if dtype == "bfloat16" else "F16"
    folder.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.astype(np.float32) for k, v in t.items()}, folder / "model.safetensors", dtype=stored
    )
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "vocab_size": BASE_VOCAB + n_new,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 128,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "torch_dtype": dtype,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    vocab = {"<|endoftext|>": 0, **{f"w{i}": i for i in range(1, BASE_VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    tok.add_tokens([AddedToken(t, special=False) for t in NEW_TOKENS])
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"})
    )


def main() -> None:
    golden(HERE / "golden")
    expected = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (new_rows, bits, group, dtype) in CONVERTED.items():
            hf = Path(tmp) / name
            tiny_llama(hf, new_rows, dtype)
            out = HERE / name
            shutil.rmtree(out, ignore_errors=True)
            convert(str(hf), str(out), quantize=True, q_group_size=group, q_bits=bits)
            (out / "README.md").unlink(missing_ok=True)  # a model card template
            weights = mx.load(str(out / "model.safetensors"))
            ids = mx.array(EXPECTED_ROWS)
            q, s, b = (
                weights[f"model.embed_tokens.{k}"][ids] for k in ("weight", "scales", "biases")
            )
            expected[name] = mx.dequantize(q, s, b, group_size=group, bits=bits)
            if new_rows == "random":
                fp = HERE / "full_precision"
                shutil.rmtree(fp, ignore_errors=True)
                fp.mkdir()
                for f in ("config.json", "tokenizer.json"):
                    shutil.copy(hf / f, fp / f)
                emb = mx.load(str(hf / "model.safetensors"))["model.embed_tokens.weight"]
                mx.save_safetensors(
                    str(fp / "model.safetensors"), {"model.embed_tokens.weight": emb}
                )
    mx.save_safetensors(str(HERE / "expected.safetensors"), expected)


if __name__ == "__main__":
    main()
