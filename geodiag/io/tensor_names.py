"""Which tensor of a checkpoint is the input embedding, and which an untied output head.

Exact names first (the common architectures), then a unique name ending like an
embedding (wrapped models); ``--tensor`` overrides. The head is analyzed on its own
only when it is not tied to the embedding.
"""

from __future__ import annotations

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
    for name in INPUT_EMBEDDING_NAMES:
        if name in names:
            return name
    hits = [n for n in names if n.endswith(INPUT_EMBEDDING_SUFFIXES)]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise InputError(where, f"several candidate embeddings {hits}; pick one with --tensor NAME")
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
    (``modules_to_save``), which untied it from the embedding in the merged model.
    """
    names = set(store.names())
    head = next((n for n in OUTPUT_HEAD_NAMES if n in names), None)
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
