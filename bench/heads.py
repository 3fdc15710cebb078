"""Which tensor geodiag takes for the input embedding and the output head, against what
the model says, for every language-model class transformers (the installed version)
builds from a tiny config on a CPU (issue 38, item 1).

For each model type of transformers' config registry and each of its classes in the
causal-LM, seq2seq-LM, image-text-to-text and vision-to-seq mappings: a tiny config
(every size field it has shrunk; the vocabulary VOCAB rows, a number no other dimension
takes), the model built, its ``get_input_embeddings()`` and ``get_output_embeddings()``
filled with distinct values, ``save_pretrained``, then
:func:`geodiag.io.formats.tensor_names.find_input_tensor` / ``find_output_head`` on the saved
files. The saved tensor that holds each matrix's values is the truth (transformers 5 may
save under other names than the model's own); a tied head holds the embedding's.

Each class twice: its config's defaults, then with ``tie_word_embeddings`` False in every
(sub-)config. One line per class and variant: ``ok``, ``MISMATCH`` (what geodiag took, what is true), ``unread``
(geodiag refuses the files: exit 2), or ``skip`` (transformers cannot build it from the
shrunk config, or it has no token input / head). Counts at the end.

Usage: PYTHONPATH=. .venv/bin/python bench/heads.py [--only TYPE ...] [--timeout 20]
"""

from __future__ import annotations

import argparse
import json
import signal
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

VOCAB = 97  # rows of the token table: no hidden, head or feed-forward size takes it
SIZES = {
    "hidden_size": 32,
    "d_model": 32,
    "n_embd": 32,
    "embed_dim": 32,
    "intermediate_size": 48,
    "d_ff": 48,
    "ffn_dim": 48,
    "encoder_ffn_dim": 48,
    "decoder_ffn_dim": 48,
    "n_inner": 48,
    "num_hidden_layers": 2,
    "num_layers": 2,
    "n_layer": 2,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "num_decoder_layers": 1,
    "depth": 1,
    "num_attention_heads": 2,
    "num_heads": 2,
    "n_head": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "d_kv": 16,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "num_experts": 2,
    "num_local_experts": 2,
    "n_routed_experts": 2,
    "num_experts_per_tok": 1,
    "moe_intermediate_size": 16,
    "state_size": 4,
    "max_position_embeddings": 128,
    "image_size": 16,
    "patch_size": 4,
}
MAPPINGS = (
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES",
)


class Timeout(BaseException):  # not caught as a failure to build or save
    pass


def _alarm(signum, frame):
    raise Timeout


def shrink(cfg, untie: bool) -> None:
    """Every size field of ``cfg`` and of its sub-configs set small; vocab_size VOCAB in
    the configs that have one; ``untie``: tie_word_embeddings False in every one."""
    from transformers import PretrainedConfig

    if untie and hasattr(cfg, "tie_word_embeddings"):
        cfg.tie_word_embeddings = False
    for key, value in list(vars(cfg).items()):
        if isinstance(value, PretrainedConfig):
            shrink(value, untie)
        elif key == "vocab_size" and isinstance(value, int):
            setattr(cfg, key, VOCAB)
        elif key in SIZES and isinstance(value, int) and value > SIZES[key]:
            setattr(cfg, key, SIZES[key])
        elif key in ("layer_types", "layers_block_type") and isinstance(value, list):
            n = getattr(cfg, "num_hidden_layers", None)
            if isinstance(n, int):
                setattr(cfg, key, value[:n])


def classes() -> list[tuple[str, str]]:
    import transformers.models.auto.modeling_auto as auto

    out: dict[tuple[str, str], None] = {}
    for name in MAPPINGS:
        for model_type, cls in getattr(auto, name, {}).items():
            for c in cls if isinstance(cls, tuple) else (cls,):
                out[(model_type, c)] = None
    return list(out)


def _fill(w, seed: int) -> np.ndarray:
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        w.copy_(torch.randn(w.shape, generator=g).to(w.dtype))
    return w.detach().float().numpy()


def truth(folder: Path, emb: np.ndarray, head: np.ndarray | None) -> tuple[set, set]:
    """The saved tensors holding the embedding's values and the head's."""
    from safetensors import safe_open

    has_emb, has_head = set(), set()
    for f in folder.glob("*.safetensors"):
        with safe_open(str(f), "np") as st:
            for k in st.keys():
                shape = st.get_slice(k).get_shape()
                if shape == list(emb.shape) and np.array_equal(st.get_tensor(k), emb):
                    has_emb.add(k)
                if head is not None and shape == list(head.shape):
                    if np.array_equal(st.get_tensor(k), head):
                        has_head.add(k)
    return has_emb, has_head


def _first(e: Exception) -> str:
    return (str(e).splitlines() or [""])[0][:100]


def one(model_type: str, cls_name: str, untie: bool) -> tuple[str, str]:
    import torch
    import transformers

    from geodiag.io.formats.registry import open_store
    from geodiag.io.formats.tensor_names import find_input_tensor, find_output_head

    cls = getattr(transformers, cls_name, None)
    if cls is None:
        return "skip", "class not exported"
    try:
        cfg = transformers.AutoConfig.for_model(model_type)
        shrink(cfg, untie)
        torch.manual_seed(0)
        model = cls(cfg).eval()
        inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    except Timeout:
        raise
    except Exception as e:
        return "skip", f"not built: {type(e).__name__}: {_first(e)}"
    w_in = getattr(inp, "weight", None)
    w_out = getattr(out, "weight", None) if out is not None else None
    if w_in is None or w_in.dim() != 2:
        return "skip", "no token table"
    tied = w_out is not None and w_out.data_ptr() == w_in.data_ptr()
    if untie and (tied or w_out is None):
        return "skip", "ties its head whatever the config says" if tied else "no head"
    emb = _fill(w_in, 1)
    head = None if w_out is None or tied or w_out.dim() != 2 else _fill(w_out, 2)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        try:
            model.save_pretrained(folder)
        except Exception as e:
            return "skip", f"not saved: {type(e).__name__}: {_first(e)}"
        has_emb, has_head = truth(folder, emb, head)
        config = json.loads((folder / "config.json").read_text())
        try:
            store = open_store(folder)
            got_in = find_input_tensor(store, folder, None, config)
            got = find_output_head(store, got_in, config)
        except Exception as e:  # InputError: exit 2
            return "unread", f"{str(e)[:160]} (true: {sorted(has_emb)})"
    want_head = "tied" if head is None else sorted(has_head)
    got_head = "tied" if got.analyzed is None else [got.analyzed]
    if got.analyzed is not None and got.analyzed in has_head:
        got_head = want_head  # one of the tensors holding the head's values
    shape = f"{list(w_in.shape)}{'' if head is None else ' + head'}"
    if got_in in has_emb and got_head == want_head:
        return "ok", f"{got_in} / {got_head[0] if got_head != 'tied' else 'tied'} {shape}"
    return "MISMATCH", f"took {got_in} / {got_head}; true {sorted(has_emb)} / {want_head}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--timeout", type=int, default=20)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    signal.signal(signal.SIGALRM, _alarm)
    counts: dict[str, int] = {}
    start = time.time()
    for model_type, cls_name in classes():
        if args.only and model_type not in args.only:
            continue
        for untie in (False, True):
            signal.alarm(args.timeout)
            try:
                status, what = one(model_type, cls_name, untie)
            except Timeout:
                status, what = "skip", f"over {args.timeout} s"
            finally:
                signal.alarm(0)
            counts[status] = counts.get(status, 0) + 1
            variant = "untied" if untie else "default"
            print(f"{status:8} {model_type:24} {cls_name:42} {variant:7} {what}", flush=True)
    print(
        f"transformers {transformers.__version__}: "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        + f" ({time.time() - start:.0f} s)"
    )


if __name__ == "__main__":
    main()
