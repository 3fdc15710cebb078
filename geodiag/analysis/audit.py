"""One consistency audit of the vocabulary: the sizes and the new tokens each file states
(tokenizer, config.json, the embedding, the head, a PEFT adapter, a GGUF's token types),
held against each other, from the files alone.

Each disagreement is an :class:`~geodiag.analysis.integrity.IntegrityFinding` with its
remedy, in the report's ``integrity`` list beside the others (the JSON, the text table, the
HTML report). All of them warn: a model built from these files misbehaves; the gate fails
on them (``max_vocabulary_disagreements``, 0 by default).

- ``config_vocab_size``: config.json's ``vocab_size`` is not the embedding's row count.
  ``from_pretrained`` builds the matrix from the config, so it refuses the stored one
  (a size mismatch) or, with ``ignore_mismatched_sizes=True``, draws it afresh.
- ``head_rows``: an untied head whose rows differ from the embedding's: ids past the
  shorter one can be read but not emitted, or emitted but not read. The head is not analyzed.
- ``tokenizer_past_rows``: added tokens whose ids lie past the embedding's last row:
  feeding one is an index error.
- ``adapter_tokens_not_trained``: new tokens a PEFT adapter cannot train: outside every
  ``trainable_token_indices`` (PEFT trains only the listed rows).
- ``adapter_head_not_trained``: the adapter trains the new tokens' input rows but not the
  head they are emitted with: an untied head outside the adapter, or a tied one that PEFT
  left on the original rows (its own copy of the embedding, ``modules_to_save``, without
  ``ensure_weight_tying``).
- ``gguf_control_tokens``: new tokens a GGUF types CONTROL. llama.cpp splits CONTROL tokens
  out of text only when asked (``parse_special``) and renders none it generates unless
  asked (``special``), so such SIDs can be neither prompted nor read as text; NORMAL and
  USER_DEFINED tokens can (``src/llama-vocab.cpp``: ``tokenizer_st_partition``,
  ``token_to_piece``).

Said elsewhere, not again: rows past the tokenizer, a padded vocabulary
(``integrity.padding_rows``); new tokens with no row, and trainable indices out of range
(bad input when the checkpoint is opened, exit 2); a tied head stored apart
(``integrity.tied_head_differs``).
"""

from __future__ import annotations

import re

import numpy as np

from geodiag.analysis.findings import token_group
from geodiag.analysis.integrity import IntegrityFinding
from geodiag.io.checkpoint import Checkpoint, Matrix
from geodiag.io.formats.gguf import CONTROL, GGUFStore
from geodiag.io.formats.peft_adapter import AdapterStore, ModulePatch
from geodiag.io.vocabulary.new_tokens import absent_from
from geodiag.io.vocabulary.tokenizer import load_tokenizer_in

RESIZE = "model.resize_token_embeddings(len(tokenizer))"
# Where the new tokens came from, in the words of a message (NewTokens.source).
_SOURCE_WORDS = {
    "argument": "as named in Python",
    "sidecar": "as semantic_ids.json names them",
    "flag": "as --new-tokens / --base-vocab-size name them",
    "tokenizer": "the tokenizer's added tokens",
    "base": "the tokens absent from the base's tokenizer",
}


def _stated_vocab_size(config: dict) -> int | None:
    """config.json's vocab_size, or its text_config's (multimodal configs)."""
    for cfg in (config, config.get("text_config")):
        if isinstance(cfg, dict) and isinstance(cfg.get("vocab_size"), int):
            return int(cfg["vocab_size"])
    return None


def config_vocab_size(ckpt: Checkpoint) -> IntegrityFinding | None:
    """config.json's vocab_size against the embedding's rows. Not for an adapter (its
    base's config predates the resize PEFT asks for before loading), a GGUF (no config),
    nor a tensor named by --tensor or --all-rows-new (maybe not the LM's embedding)."""
    if isinstance(ckpt.store, AdapterStore | GGUFStore) or not ckpt.matrices:
        return None
    if ckpt.read.tensor is not None or ckpt.read.all_rows_new:
        return None
    stated, emb = _stated_vocab_size(ckpt.config), ckpt.matrices[0]
    if stated is None or stated == emb.n_rows:
        return None
    return IntegrityFinding(
        "config_vocab_size",
        "warn",
        f"config.json says vocab_size {stated} but '{emb.tensor}' has {emb.n_rows} rows: "
        "from_pretrained builds the embedding from the config and refuses the stored one "
        "(size mismatch), or with ignore_mismatched_sizes=True replaces it with random rows; "
        "remedy: grow the vocabulary with model.resize_token_embeddings(n), which sets "
        f"config.vocab_size, or set model.config.vocab_size = {emb.n_rows} before save_pretrained",
        count=abs(emb.n_rows - stated),
    )


def head_rows(ckpt: Checkpoint) -> IntegrityFinding | None:
    """An untied head left out of the analysis because its rows differ from the embedding's."""
    head = ckpt.head_left_out
    if head is None or not ckpt.matrices:
        return None
    emb = ckpt.matrices[0]
    lo, hi = sorted((head.n_rows, emb.n_rows))
    cut = ckpt.new.ids[ckpt.new.ids >= lo]
    named = f" ({token_group(ckpt, cut).listed()})" if len(cut) else ""
    if head.n_rows < emb.n_rows:
        what = f"ids {lo}..{hi - 1}{named} have input rows but no head row: they cannot be emitted"
    else:
        what = f"ids {lo}..{hi - 1} have head rows but no input row: they can be emitted, not read"
    if isinstance(ckpt.store, AdapterStore):
        remedy = (
            f"the adapter saves the embedding's {emb.n_rows} rows but not the untied head, so "
            "a base resized to load it gives the head fresh, untrained rows for the new tokens; "
            "train and save the head too (modules_to_save=['embed_tokens', 'lm_head'], or "
            "trainable_token_indices for 'lm_head' as for 'embed_tokens')"
        )
    else:
        remedy = (
            "from_pretrained refuses the file (size mismatch); resize with "
            f"{RESIZE}, which resizes an untied head with the embedding, then save again"
        )
    return IntegrityFinding(
        "head_rows",
        "warn",
        f"the untied output head '{head.tensor}' has {head.n_rows} rows but the embedding "
        f"'{emb.tensor}' has {emb.n_rows}: {what}; the head is not analyzed; remedy: {remedy}",
        token_group(ckpt, cut) if len(cut) else None,
        hi - lo,
    )


def tokenizer_past_rows(ckpt: Checkpoint) -> IntegrityFinding | None:
    """Added tokens with no row (the new tokens have rows, or opening would have failed).
    A GGUF's token list is checked against its rows when it is opened."""
    tok = ckpt.tokenizer
    if tok is None or not ckpt.matrices or isinstance(ckpt.store, GGUFStore):
        return None
    n_rows = ckpt.matrices[0].n_rows
    added = getattr(tok, "added", None) or []  # rows in memory name tokens, list none
    past = np.array(sorted(t.id for t in added if t.id >= n_rows), dtype=np.int64)
    if not len(past):
        return None
    group = token_group(ckpt, past)
    return IntegrityFinding(
        "tokenizer_past_rows",
        "warn",
        f"{len(past)} added tokens of the tokenizer ({group.listed()}; ids {int(past[0])}.."
        f"{int(past[-1])}) lie past the embedding's {n_rows} rows: feeding one is an index "
        f"error (a device-side assert on a GPU); remedy: {RESIZE} after adding tokens, then "
        "save the model again",
        group,
        len(past),
    )


ALL_ROWS = "all rows"


def _matches(names: object, module: str) -> bool:
    """PEFT's rule for modules_to_save and a list of target_modules: a name ending the
    module's path; a string of target_modules is a regex matched in full."""
    if isinstance(names, str):
        return re.fullmatch(names, module) is not None
    return isinstance(names, list) and any(module == k or module.endswith(f".{k}") for k in names)


def _trained(p: ModulePatch | None, config: dict) -> str | np.ndarray | None:
    """The rows of a matrix the adapter trains: ALL_ROWS (its own copy, listed in
    modules_to_save, or a LoRA on it), its trainable token indices, or None. A whole
    matrix saved but not listed is the resized base PEFT saves beside the adapter
    (save_embedding_layers): stored, not trained."""
    if p is None:
        return None
    if p.lora_a is not None or (
        p.full_kind == "modules_to_save" and _matches(config.get("modules_to_save"), p.module)
    ):
        return ALL_ROWS
    return p.token_indices


def _declared_new(ckpt: Checkpoint, store: AdapterStore, trainable: np.ndarray):
    """(ids, where from) of the new tokens as a source other than the adapter's indices
    states them, or None: the resolved new tokens when they came from elsewhere, else the
    sidecar, else the tokenizer's tokens absent from the base's, else the tokenizer's added
    non-special tokens from the first trainable index on (a base's own added tokens, such
    as Qwen's ``<tool_call>``, sit below the new ones)."""
    new = ckpt.new
    if new.source in _SOURCE_WORDS:
        return new.ids, _SOURCE_WORDS[new.source]
    side = ckpt.sidecar
    if side is not None and side.has_token_ids:
        ids = np.array([t for lv in side.levels for t in lv.token_ids], np.int64)
        return ids, _SOURCE_WORDS["sidecar"]
    tok = ckpt.tokenizer
    if tok is None:
        return None
    base_root = store.info.base_root
    base_tok = load_tokenizer_in(lambda name: base_root / name)
    if base_tok is not None and base_tok.path != tok.path:
        ids = np.array([t.id for t in absent_from(tok, base_tok)], np.int64)
        if len(ids):
            return ids, _SOURCE_WORDS["base"]
    first = int(trainable.min())
    ids = np.array([t.id for t in tok.added_non_special() if t.id >= first], np.int64)
    return (ids, _SOURCE_WORDS["tokenizer"]) if len(ids) else None


def adapter_tokens_not_trained(ckpt: Checkpoint) -> IntegrityFinding | None:
    """New tokens the adapter cannot train: outside its trainable_token_indices when those
    are the only rows of the embedding it trains, or every one when it saves the resized
    embedding and trains none of it."""
    store = ckpt.store
    if not isinstance(store, AdapterStore) or not ckpt.matrices:
        return None
    p = store.patches.get(ckpt.matrices[0].tensor)
    if p is None:  # the base's rows, as the base stored them (perhaps trained before)
        return None
    trained = _trained(p, store.info.config)
    if isinstance(trained, str):
        return None
    if trained is None:
        if p.full is None or not len(ckpt.new.ids):
            return None
        ids, where, trained = ckpt.new.ids, _SOURCE_WORDS.get(ckpt.new.source), np.zeros(0, int)
        how = (
            f"the adapter saves the resized '{p.module}' (PEFT saves a resized embedding "
            "beside the adapter) but trains none of its rows: no modules_to_save, LoRA or "
            "trainable_token_indices on it"
        )
    else:
        declared = _declared_new(ckpt, store, trained)
        if declared is None:
            return None
        ids, where = declared
        how = (
            "they are in none of the adapter's trainable_token_indices, and PEFT trains only those"
        )
    missing = np.setdiff1d(ids, trained)
    if not len(missing):
        return None
    group = token_group(ckpt, missing)
    measured = "; they are not among the rows measured here" if ckpt.new.source == "adapter" else ""
    return IntegrityFinding(
        "adapter_tokens_not_trained",
        "warn",
        f"{len(missing)} of the {len(ids)} new tokens{f' ({where})' if where else ''} cannot "
        f"train ({group.listed()}): {how}, so they kept their init{measured}; remedy: list "
        "every new token, LoraConfig(trainable_token_indices={'embed_tokens': "
        "tokenizer.convert_tokens_to_ids(new_tokens)}), or modules_to_save=['embed_tokens']",
        group,
        len(missing),
    )


def _head_of(ckpt: Checkpoint) -> Matrix | None:
    return ckpt.matrices[1] if len(ckpt.matrices) > 1 else ckpt.head_left_out


def adapter_head_not_trained(ckpt: Checkpoint) -> IntegrityFinding | None:
    """The adapter trains the embedding's new rows but not the head that emits them."""
    store = ckpt.store
    if not isinstance(store, AdapterStore) or not ckpt.matrices:
        return None
    emb = ckpt.matrices[0]
    p = store.patches.get(emb.tensor)
    config = store.info.config
    trained = _trained(p, config)
    if trained is None:
        return None
    head = _head_of(ckpt)
    if head is None:  # tied: PEFT ties trainable tokens and LoRA; its own copy it does not
        if not isinstance(trained, str) or p.lora_a is not None:
            return None
        if config.get("ensure_weight_tying"):
            return None
        return IntegrityFinding(
            "adapter_head_not_trained",
            "warn",
            f"the base ties the head to the embedding, and the adapter trains its own copy of "
            f"'{emb.tensor}' (modules_to_save) without ensure_weight_tying: while it trained, "
            "the head kept the original rows (PEFT warns of this at get_peft_model, its issue "
            "#2777), so the new tokens were emitted with their init rows, and the merged model "
            "emits them with the trained ones; remedy: LoraConfig(..., ensure_weight_tying=True)",
        )
    module = head.tensor.removesuffix(".weight")
    if _trained(store.patches.get(head.tensor), config) is not None:
        return None
    if _matches(config.get("target_modules"), module):
        return None  # a LoRA on the head's Linear
    return IntegrityFinding(
        "adapter_head_not_trained",
        "warn",
        f"the adapter trains the new tokens' input rows ('{emb.tensor}': {', '.join(p.kinds())}) "
        f"but not the untied output head '{head.tensor}': the model reads them as trained and "
        "emits them with the head's init rows; remedy: train the head too, "
        "modules_to_save=['embed_tokens', 'lm_head'] or "
        "trainable_token_indices={'embed_tokens': ids, 'lm_head': ids}",
    )


def gguf_control_tokens(ckpt: Checkpoint) -> IntegrityFinding | None:
    """New tokens a GGUF types CONTROL (module docstring)."""
    store = ckpt.store
    if not isinstance(store, GGUFStore) or not len(ckpt.new.ids):
        return None
    types = store.token_types()
    if types is None:
        return None
    ids = ckpt.new.ids[ckpt.new.ids < len(types)]
    control = np.sort(ids[types[ids] == CONTROL])
    if not len(control):
        return None
    group = token_group(ckpt, control)
    return IntegrityFinding(
        "gguf_control_tokens",
        "warn",
        f"{len(control)} of the {len(ckpt.new.ids)} new tokens are typed CONTROL in "
        f"tokenizer.ggml.token_type ({group.listed()}): llama.cpp splits CONTROL tokens out "
        "of text only with parse_special (llama-cpp-python: tokenize(..., special=True)) and "
        "renders none it generates without special output (llama-cli --special), so they can "
        "be neither prompted nor read as text; remedy: add them as plain tokens "
        "(tokenizer.add_tokens(tokens), not special, and not named <|...|>, which "
        "convert_hf_to_gguf.py types CONTROL whatever the flag), then convert again",
        group,
        len(control),
    )


# The audit's findings, in the order they are listed (the module docstring's); the gate's
# ``max_vocabulary_disagreements`` counts the report's findings of these kinds.
AUDITS = (
    config_vocab_size,
    head_rows,
    tokenizer_past_rows,
    adapter_tokens_not_trained,
    adapter_head_not_trained,
    gguf_control_tokens,
)
AUDIT_KINDS = tuple(f.__name__ for f in AUDITS)


def audit(ckpt: Checkpoint) -> list[IntegrityFinding]:
    """Every disagreement of ``ckpt``'s vocabulary between its files (module docstring)."""
    found = [check(ckpt) for check in AUDITS]
    return [f for f in found if f is not None]
