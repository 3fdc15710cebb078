"""Which tensor of a checkpoint is the input embedding, and which an untied output head,
read from what the files say rather than from a list of architectures.

- The input embedding is the 2-D tensor whose module is named like a token table (its
  last name part ``embed_tokens``, ``wte``, ``tok_embeddings``, ``word_embeddings``,
  ``embed_in``, ``shared``, ``embeddings``, ``token_embedding``, ``token_embd``, ...), outside a
  vision or audio tower and not a position, patch or type table; among several, the ones
  whose rows are a vocabulary size config.json states (at its top, in ``text_config`` or
  another sub-config: :func:`language_configs`), then T5's and BART's ``shared`` over the
  encoder's and decoder's stored copies of it. Llama's ``model.embed_tokens``, a
  vision-language model's ``model.language_model.embed_tokens`` (transformers 5 in memory)
  or ``language_model.model.embed_tokens`` (as transformers 4 and 5.24 save Llava and
  Gemma 3), Mamba's ``backbone.embeddings``, T5's ``shared`` all come out of this rule.
  ``--tensor`` overrides.
- The output head is the other 2-D tensor of the same width whose rows are the
  embedding's or a stated vocabulary size, outside any numbered layer (a multi-token
  prediction head inside one is not the LM's) and not named like a token table: ``lm_head``
  wherever the prefix puts it, GPT-NeoX's ``embed_out``, GGUF's ``output``. It is analyzed
  on its own unless it is tied (:func:`tie_setting`).

A PEFT model's full state dict (``model.state_dict()`` saved, or accelerate's
``save_model``) names its tensors ``base_model.model.{name}``, and a module in
``modules_to_save`` twice: ``{module}.modules_to_save.{adapter}.weight``, the trained
copy the model uses, and ``{module}.original_module.weight``, its weights before
training. Names are matched on what they stand for (:func:`plain_name`): the trained
copy is the matrix; its original is a reference (:func:`original_of`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.tensor_store import TensorStore

# The last part of a token table's module name (the tensor's name without ``.weight``).
EMBEDDING_MODULE = re.compile(
    r"(embed_tokens|wte|tok_embeddings|word_embeddings|embed_in|shared|embeddings|"
    r"token_embedding|token_embeddings|token_embd|tok_embed|embedding|embed|word_emb|"
    r"input_embedding|input_embeddings|tokens_embed)"
)
# A name part that puts a table outside the language model's token input: a vision or
# audio tower's, or a position, patch, type or per-layer table.
NOT_TOKENS = re.compile(
    r"vision|visual|image|video|audio|speech|patch|position|pos_|wpe|token_type|segment|"
    r"per_layer|relative|rel_attn|codebook|quantizer|qformer|protein"
)
# A numbered block (``layers.3.``, ``h.0.``, ``block.11.``): a head inside one is not the LM's.
NUMBERED = re.compile(r"(^|\.)\d+(\.|$)")
# Among several head candidates, the one named like a head.
HEAD_WORDS = re.compile(
    r"lm_head|embed_out|head|output|logits|^decoder$"
)  # BERT: cls.predictions.decoder
# Where config.json keeps the language model's own config in composite models
# (transformers' get_text_config() names, and those of remote-code VLMs).
LANGUAGE_CONFIG_KEYS = (
    "text_config",
    "decoder",
    "generator",
    "text_encoder",
    "llm_config",
    "language_config",
    "thinker_config",
)
OUTPUT_HEAD_NAMES = (  # a head's names where no file says more (PEFT's copy of a tied head)
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


def language_configs(config: dict) -> list[dict]:
    """The configs that describe the language model, the most specific first: each
    sub-config under LANGUAGE_CONFIG_KEYS (one level down too: Qwen2.5-Omni's
    ``thinker_config.text_config``), then config.json's top level."""
    out: list[dict] = []
    for key in LANGUAGE_CONFIG_KEYS:
        sub = config.get(key)
        if isinstance(sub, dict):
            out += [c for c in language_configs(sub) if c is not sub] + [sub]
    return [*out, config]


def stated_vocab_sizes(config: dict) -> list[int]:
    """Every vocab_size the language configs state, the most specific first."""
    sizes = [c.get("vocab_size") for c in language_configs(config)]
    return list(dict.fromkeys(s for s in sizes if isinstance(s, int) and s > 0))


# The config keys that state a token table's or a head's width (RemBERT's and ALBERT's
# tables are narrower than hidden_size; xLSTM's is embedding_dim).
WIDTH_KEYS = (
    "hidden_size",
    "d_model",
    "n_embd",
    "embedding_size",
    "input_embedding_size",
    "output_embedding_size",
    "embedding_dim",
)


def stated_widths(config: dict, n_rows: int | None = None) -> set[int]:
    """The widths config.json states for the language model's token tables and head: the
    WIDTH_KEYS of the language configs whose vocab_size is ``n_rows`` (of all of them,
    when none is); empty when none states one."""
    configs = language_configs(config)
    matching = [c for c in configs if n_rows is not None and c.get("vocab_size") == n_rows]
    return {int(c[k]) for c in matching or configs for k in WIDTH_KEYS if isinstance(c.get(k), int)}


def tie_setting(config: dict) -> bool | None:
    """Whether config.json ties the head to the embedding; None when it does not say.

    transformers 5 ties when the top level says so or, for a save from before v5, the
    text config does (e.g. LlavaConfig, Qwen2VLConfig: ``tie_word_embeddings`` is taken
    from ``text_config`` when the top level says False). T5 v1.1 as transformers 5 saves
    it: the config always says tied, ``scale_decoder_outputs`` keeps the original False,
    and reloading unties a stored head.
    """
    if config.get("scale_decoder_outputs") is False:
        return False
    said = [c.get("tie_word_embeddings") for c in language_configs(config)]
    said = [v for v in said if isinstance(v, bool)]
    return any(said) if said else None


def _module(plain: str) -> list[str]:
    return plain.removesuffix(".weight").split(".")


def embedding_named(plain: str) -> bool:
    """A name that says token table (module docstring), outside vision or audio."""
    parts = _module(plain)
    return EMBEDDING_MODULE.fullmatch(parts[-1]) is not None and not any(
        NOT_TOKENS.search(p) for p in parts
    )


def _two_d(store: TensorStore, name: str) -> bool:
    return len(store.shape(name)) == 2


def find_input_tensor(
    store: TensorStore, where: Path, override: str | None, config: dict | None = None
) -> str:
    """The input embedding's name: ``override`` (``--tensor``), else the module
    docstring's rule."""
    names = store.names()
    if override is not None:
        if override not in names:
            raise InputError(
                where, f"--tensor '{override}' not found (tensors: {', '.join(names[:8])}...)"
            )
        return override
    plain = {
        p: stored
        for p, stored in _by_plain_name(names).items()
        if embedding_named(p) and _two_d(store, stored[0])
    }
    vocab = stated_vocab_sizes(config or {})
    picked = _narrow(plain, store, vocab) or _unnamed_table(store, vocab)
    if picked:
        return _one([s for p in picked for s in _by_plain_name(names)[p]], where)
    two_d = [n for n in names if _two_d(store, n)][:6]
    raise InputError(
        where,
        f"no recognizable input embedding among {len(names)} tensors (a 2-D tensor named "
        "like a token table: embed_tokens, wte, tok_embeddings, word_embeddings, embed_in, "
        f"shared, embeddings, ...); pass --tensor NAME (2-D tensors include: "
        f"{', '.join(two_d) or 'none'})",
    )


def _unnamed_table(store: TensorStore, vocab: list[int]) -> list[str]:
    """No tensor named like a token table (CTRL's ``transformer.w``): the one 2-D tensor
    whose rows are a stated vocab size, outside numbered layers and towers, not named like
    a head; none when that is not one."""
    found = [
        p
        for p, stored in _by_plain_name(store.names()).items()
        if _two_d(store, stored[0])
        and store.shape(stored[0])[0] in vocab
        and not NUMBERED.search(p.removesuffix(".weight"))
        and not any(NOT_TOKENS.search(part) for part in _module(p))
        and not HEAD_WORDS.search(_module(p)[-1])
    ]
    return found if len(found) == 1 else []


def _narrow(plain: dict[str, list[str]], store: TensorStore, vocab: list[int]) -> list[str]:
    """The plain names left of the candidates ``plain``: those whose rows are a stated
    vocab size, then ``shared`` over the encoder's and decoder's copies of it (several
    left: the caller asks for --tensor)."""
    cands = list(plain)
    for size in vocab:  # the most specific stated size that some candidate has
        hit = [p for p in cands if store.shape(plain[p][0])[0] == size]
        if hit:
            cands = hit
            break
    if len(cands) > 1:
        shared = [p for p in cands if _module(p)[-1] == "shared"]
        cands = shared or cands
    if len(cands) > 1:  # an encoder-decoder with a table each: the encoder's reads the input
        encoder = [p for p in cands if "encoder" in _module(p)]
        cands = encoder if len(encoder) == 1 else cands
    return cands


@dataclass(frozen=True)
class Head:
    """The output head as the files say it: the tensor stored (None: none is), whether
    it is tied to the embedding, and the matrix analyzed on its own (None when tied)."""

    stored: str | None
    tied: bool
    analyzed: str | None
    why: str  # how the tie was decided, for the notes
    untied_by_adapter: bool = False  # a PEFT modules_to_save copy untied a tied head


def _head_shaped(got: tuple, table: tuple, rows: set[int], named: object) -> bool:
    """[vocab, the table's width]; or named like a head with one of the two: wider than the
    table (RemBERT's, xLSTM's heads), or rows left at another size (a head not resized
    with the embedding: the audit's head_rows)."""
    rows_ok, width_ok = got[0] in rows, got[1] == table[1]
    return (rows_ok and width_ok) or (bool(named) and (rows_ok or width_ok))


def find_head_tensor(store: TensorStore, input_name: str, config: dict) -> str | None:
    """The stored output head (module docstring), or None."""
    shape = store.shape(input_name)
    rows = {shape[0], *stated_vocab_sizes(config)}
    plain = _by_plain_name(store.names())
    input_plain = plain_name(input_name)
    cands = [
        p
        for p, stored in plain.items()
        if p != input_plain
        and not embedding_named(p)
        and not NUMBERED.search(p.removesuffix(".weight"))
        and not any(NOT_TOKENS.search(part) for part in _module(p))
        and _two_d(store, stored[0])
        and _head_shaped(store.shape(stored[0]), shape, rows, HEAD_WORDS.search(_module(p)[-1]))
    ]
    if len(cands) > 1:
        cands = [p for p in cands if HEAD_WORDS.search(_module(p)[-1])] or cands
    if len(cands) > 1:
        same = [p for p in cands if store.shape(plain[p][0]) == shape]
        cands = same or cands
    return plain[cands[0]][0] if len(cands) == 1 else None


# Rows compared to tell a stored copy of a tied embedding from a head of its own: spread
# over the first half of the rows (original tokens: a copy that differs on new rows only
# is tied, and integrity's tied_head_differs says so); a copy across dtypes agrees to
# COPY_RTOL of a row's norm (bf16 keeps ~3 significant digits).
COPY_PROBE_ROWS = 16
COPY_RTOL = 1e-2


def stored_copy(store: TensorStore, a: str, b: str) -> bool:
    """Whether tensor ``b`` holds ``a``'s rows (same shape), or one multiple of them (a
    Gemma head saved with the input's sqrt(d) scaling baked in: integrity's
    tied_head_differs names it), probed on COPY_PROBE_ROWS of the first half."""
    n = store.shape(a)[0]
    ids = np.unique(np.linspace(0, max(n // 2 - 1, 0), COPY_PROBE_ROWS).astype(np.int64))
    x, y = store.read_rows(a, ids), store.read_rows(b, ids)  # (k, d) float64
    xx = float(np.einsum("ij,ij->", x, x))
    scale = float(np.einsum("ij,ij->", x, y)) / xx if xx > 0 else 1.0
    diff = np.sqrt(np.einsum("ij,ij->i", scale * x - y, scale * x - y))
    return bool(np.all(diff <= COPY_RTOL * np.sqrt(np.einsum("ij,ij->i", y, y))))


def _decoder_table(store: TensorStore, input_name: str) -> str | None:
    """An encoder-decoder's decoder token table of the input's shape that holds rows of its
    own (FSMT, T5Gemma: the head is tied to it, not to the encoder's), else None."""
    shape = store.shape(input_name)
    found = [
        stored[0]
        for p, stored in _by_plain_name(store.names()).items()
        if stored[0] != input_name
        and embedding_named(p)
        and "decoder" in _module(p)
        and store.shape(stored[0]) == shape
    ]
    if len(found) != 1 or stored_copy(store, input_name, found[0]):
        return None
    return found[0]


def find_output_head(
    store: TensorStore, input_name: str, config: dict, untied_by_adapter: bool = False
) -> Head:
    """The head: tied when none is stored, or config.json ties it (:func:`tie_setting`)
    and the stored one is a copy of the embedding (:func:`stored_copy`); a stored head
    with rows of its own is analyzed on its own, as transformers 5 loads it (it ties
    only heads equal to the embedding, and warns of the others).

    ``untied_by_adapter``: a PEFT adapter saved its own copy of the head
    (``modules_to_save``), which untied it from the embedding in the merged model; a
    copy in a PEFT model's full state dict does the same.
    """
    head = find_head_tensor(store, input_name, config)
    untied_by_adapter = untied_by_adapter or (head is not None and original_of(head) is not None)
    tie = tie_setting(config)
    if head is None or head == input_name:
        decoder = _decoder_table(store, input_name)
        if decoder is not None:
            why = "the decoder's own token table, which its head is tied to"
            return Head(decoder, False, decoder, why)
        return Head(None, True, None, "no output head is stored: tied to the embedding")
    if tie is True and not untied_by_adapter:
        if store.shape(head) != store.shape(input_name) or stored_copy(store, input_name, head):
            # a stored copy of the tied matrix: analyzed once (integrity's
            # tied_head_differs compares their new rows)
            return Head(head, True, None, "config.json ties it to the embedding")
        why = "config.json ties it, but the stored head holds rows of its own"
    else:
        why = (
            "the adapter saves its own copy"
            if untied_by_adapter
            else "config.json unties it"
            if tie is False
            else "stored, and config.json does not say it is tied"
        )
    return Head(head, False, head, why, untied_by_adapter)
