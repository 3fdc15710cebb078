"""Which tensor of a checkpoint is the input embedding, and which an untied output head.

Exact names first (the common architectures), then a unique name ending like an
embedding (wrapped models); ``--tensor`` overrides. The head is analyzed on its own
only when it is not tied to the embedding.

A PEFT model's full state dict (``model.state_dict()`` saved, or accelerate's
``save_model``) names its tensors ``base_model.model.{name}``, and a module in
``modules_to_save`` twice: ``{module}.modules_to_save.{adapter}.weight``, the trained
copy the model uses, and ``{module}.original_module.weight``, its weights before
training. Names are matched on what they stand for (:func:`plain_name`): the trained
copy is the matrix; its original is a reference (:func:`original_of`).
"""

from __future__ import annotations

import re
from pathlib import Path

from geodiag.errors import InputError
from geodiag.io.tensor_store import TensorStore

INPUT_EMBEDDING_NAMES = (
    "model.embed_tokens.weight",  # Llama, Qwen, Mistral, SmolLM, Gemma
    "transformer.wte.weight",  # GPT-2, GPT-J
    "embeddings.word_embeddings.weight",  # BERT-like
    "bert.embeddings.word_embeddings.weight",
    "gpt_neox.embed_in.weight",  # Pythia
    "model.decoder.embed_tokens.weight",  # OPT
    "transformer.word_embeddings.weight",  # BLOOM
    "shared.weight",  # T5 (encoder./decoder.embed_tokens.weight, when stored, are copies)
    "model.shared.weight",  # BART, mBART, Pegasus
    "embed_tokens.weight",
    "wte.weight",
    "token_embd.weight",  # GGUF (llama.cpp)
)
INPUT_EMBEDDING_SUFFIXES = (
    "embed_tokens.weight",
    ".wte.weight",
    "word_embeddings.weight",
    "embed_in.weight",
)
OUTPUT_HEAD_NAMES = (
    "lm_head.weight",
    "embed_out.weight",
    "model.lm_head.weight",
    "output.weight",  # GGUF (llama.cpp), stored only when the head is not tied
)
PEFT_PREFIX = "base_model.model."  # PeftModel's prefix of the wrapped model's names
# {module}.modules_to_save.{adapter}.weight: the trained copy of a module in modules_to_save
_SAVED_COPY = re.compile(r"\.modules_to_save\.[^.]+\.weight$")
ORIGINAL_SUFFIX = ".original_module.weight"  # beside it: the module before training


def plain_name(name: str) -> str | None:
    """The name ``name`` stands for in the unwrapped model: PEFT's prefix and a
    ``modules_to_save`` copy's infix removed; None for an ``original_module`` (never the
    matrix itself)."""
    if name.endswith(ORIGINAL_SUFFIX):
        return None
    return _SAVED_COPY.sub(".weight", name.removeprefix(PEFT_PREFIX))


def original_of(name: str) -> str | None:
    """PEFT's ``original_module`` name beside the ``modules_to_save`` copy ``name``, else None."""
    return _SAVED_COPY.sub(ORIGINAL_SUFFIX, name) if _SAVED_COPY.search(name) else None


def _by_plain_name(names: list[str]) -> dict[str, list[str]]:
    """plain name -> the stored names that stand for it (several: one copy per adapter)."""
    out: dict[str, list[str]] = {}
    for n in names:
        plain = plain_name(n)
        if plain is not None:
            out.setdefault(plain, []).append(n)
    return out


def _one(stored: list[str], where: Path) -> str:
    if len(stored) > 1:
        raise InputError(
            where, f"several candidate embeddings {stored}; pick one with --tensor NAME"
        )
    return stored[0]


def find_input_tensor(store: TensorStore, where: Path, override: str | None) -> str:
    """The input embedding's name: ``override`` (``--tensor``), a known name, else the one
    name with a known suffix."""
    names = store.names()
    if override is not None:
        if override not in names:
            raise InputError(
                where, f"--tensor '{override}' not found (tensors: {', '.join(names[:8])}...)"
            )
        return override
    plain = _by_plain_name(names)
    for name in INPUT_EMBEDDING_NAMES:
        if name in plain:
            return _one(plain[name], where)
    hits = [
        s for p, stored in plain.items() if p.endswith(INPUT_EMBEDDING_SUFFIXES) for s in stored
    ]
    if hits:
        return _one(hits, where)
    two_d = [n for n in names if len(store.shape(n)) == 2][:6]
    raise InputError(
        where,
        f"no recognizable input embedding among {len(names)} tensors (known names: "
        f"{', '.join(INPUT_EMBEDDING_NAMES)}; or one name ending in "
        f"{', '.join(INPUT_EMBEDDING_SUFFIXES)}); pass --tensor NAME "
        f"(2-D tensors include: {', '.join(two_d) or 'none'})",
    )


def find_output_head(
    store: TensorStore, input_name: str, config: dict, untied_by_adapter: bool = False
) -> tuple[str | None, bool]:
    """(untied head tensor or None, tied?). Tied when config says so or no head is stored.

    ``untied_by_adapter``: a PEFT adapter saved its own copy of the head
    (``modules_to_save``), which untied it from the embedding in the merged model; a
    copy in a PEFT model's full state dict does the same.
    """
    plain = _by_plain_name(store.names())
    head = next((plain[n][0] for n in OUTPUT_HEAD_NAMES if n in plain), None)
    untied_by_adapter = untied_by_adapter or (head is not None and original_of(head) is not None)
    tie = config.get("tie_word_embeddings")
    if config.get("scale_decoder_outputs") is False:
        # T5 v1.1 as transformers 5 saves it: the config always says tied, this field keeps
        # the original tie_word_embeddings=false, and reloading unties a stored head.
        tie = False
    if head is None or head == input_name:
        return None, True
    if tie is True and not untied_by_adapter:
        return None, True  # a stored copy of the tied matrix: same rows, analyze once
    return head, False
