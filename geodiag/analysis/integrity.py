"""What a save, a merge or a reload did to the new rows: findings about the checkpoint as a whole.

- ``tied_head_differs``: config.json says the head is tied, but the file stores a head
  whose new rows differ from the embedding's. A loader that ties drops the stored head
  (the model emits with the embedding's rows); one that does not keeps two matrices:
  which of them was trained is a coin toss. Read the new rows of both and compare.
- ``head_not_moved``: an untied head whose new rows barely moved since ``--reference``
  while the input rows did: the head was frozen (or not saved), so the model cannot
  emit the tokens it learned to read.
- ``padding_rows``: rows past the tokenizer's length (``len(tokenizer) <= id < rows``),
  counted apart from the new tokens; a model can still sample one when its head row is
  not zero.
- ``on_padding``: without ``--base``, new tokens below unused padding rows past the
  tokenizer: they may sit on rows the base already had (``resize_token_embeddings`` grows
  nothing then, so no init ran), and whether they moved off the base's values needs the base.
  Their norms were compared with the padding rows' (``UntrainedRows.padding``); rows alike
  are untrained findings, and this note says what the comparison could not settle.
- ``embedding_scale``: Gemma-family models multiply the input embedding by sqrt(d)
  (their normalizer) before the first layer: input and head norms are compared after it.
- ``isotropic_draw``: the new rows, as a set, have no trace of the vocabulary's anisotropy
  (an isotropic draw, :func:`geodiag.metrics.indicators.isotropy`) but are neither at the
  model's initializer nor a noise init around the mean: a deliberate random init untrained
  or trained alike, which only ``--reference INIT`` (or ``--base``) tells apart.
- ``indicator_unjudged``: the files mark rows unused, but the under-trained indicator
  cannot judge against them (too few, or they do not stand apart from the other rows).
- ``adapter_server``: an adapter whose embedding changes a common server does not load
  (vLLM loads LoRA adapters, not ``modules_to_save`` nor ``trainable_tokens_delta``).
- ``special_tokens_left_out``: added special tokens past the base vocabulary that the
  new-token rule (the tokenizer's added non-special tokens) leaves out, e.g. a chat-format
  tool's ``<|im_start|>`` / ``<|im_end|>``: named, with those the template or the data feed
  (their rows are judged as fed tokens, :mod:`geodiag.analysis.fed`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geodiag.analysis.findings import TokenGroup, UntrainedRows, token_group
from geodiag.analysis.rows import MatrixRows, read_padding
from geodiag.io.checkpoint import MAX_PADDING_ROWS, Checkpoint
from geodiag.io.vocabulary.tokenizer import list_names
from geodiag.metrics.geometry import ROW_BLOCK
from geodiag.metrics.untrained import MIN_PADDING_ROWS, PADDING_ALPHA, quantile

# Gemma's forward pass scales the input embedding by sqrt(hidden_size) (the "normalizer").
SCALED_INPUT_MODEL_TYPES = ("gemma", "gemma2", "gemma3", "gemma3_text", "recurrent_gemma")
# A copy written by one save is bit-exact; across dtypes (one of them cast to bf16, ~3
# significant digits) two copies of a row agree to this fraction of its norm.
COPY_RTOL = 1e-2
_BLOCK_ROWS = ROW_BLOCK  # rows per block when the head is compared with the embedding
SERVER_KINDS = ("modules_to_save", "trainable tokens")


@dataclass
class IntegrityFinding:
    kind: str  # one of the module docstring's names
    status: str  # "warn": a model built from these files misbehaves; "note": informational
    message: str
    tokens: TokenGroup | None = None  # the rows concerned, when they are new tokens
    count: int | None = None


def input_scale(config: dict) -> float:
    """The factor the forward pass multiplies input embeddings by: sqrt(d) for Gemma, else 1."""
    hidden = config.get("hidden_size")
    if config.get("model_type") in SCALED_INPUT_MODEL_TYPES and isinstance(hidden, int):
        return float(np.sqrt(hidden))
    return 1.0


def _stored_tied_head(ckpt: Checkpoint) -> str | None:
    """The head tensor stored beside a tied embedding (analyzed as a copy), if any."""
    if not ckpt.tied or not ckpt.matrices:
        return None
    emb = ckpt.matrices[0]
    name = ckpt.head.stored if ckpt.head is not None else None
    if name is not None and name != emb.tensor and ckpt.store.shape(name) == (emb.n_rows, emb.dim):
        return name
    return None


def tied_head_differs(ckpt: Checkpoint, held: MatrixRows | None = None) -> IntegrityFinding | None:
    """A tied config whose file stores a head that differs from the embedding on new rows.
    ``held``: the embedding's new rows as measuring it read them (else read here)."""
    head = _stored_tied_head(ckpt)
    if head is None or not len(ckpt.new.ids):
        return None
    ids = ckpt.new.ids
    scale = input_scale(ckpt.config)
    rtol = 0.0 if ckpt.store.dtype(head) == ckpt.matrices[0].dtype else COPY_RTOL

    def differ(a: np.ndarray, b: np.ndarray, exact: bool) -> np.ndarray:
        if exact and rtol == 0.0:
            return ~np.all(a == b, axis=1)
        diff = np.sqrt(np.einsum("ij,ij->i", a - b, a - b))
        norm = np.maximum(np.sqrt(np.einsum("ij,ij->i", a, a)), np.finfo(np.float64).tiny)
        return ~(diff <= max(rtol, 1e-6) * norm)  # NaN rows differ

    # A block of rows of each at a time: two (n, d) float64 copies at 100,000 new rows
    # would be 1.6 GB. The embedding's bytes are read in the same order as one read.
    bad, scaled = np.zeros(len(ids), bool), scale != 1.0
    have = held.rows if held is not None and held.all_kept else None
    for start in range(0, len(ids), _BLOCK_ROWS):
        block = ids[start : start + _BLOCK_ROWS]
        if have is None:
            emb = ckpt.read_rows(ckpt.matrices[0], block)
        else:  # (b, d) float64, as read_rows returns them
            emb = np.asarray(have[start : start + _BLOCK_ROWS], dtype=np.float64)
        out = ckpt.store.read_rows(head, block)
        bad[start : start + len(block)] = differ(emb, out, exact=True)
        scaled = scaled and not differ(emb * scale, out, exact=False).any()
    if not bad.any():
        return None
    what = (
        f"holds the embedding's rows times Gemma's sqrt(d) = {scale:.4g} (the input scaling "
        "baked into the head)"
        if scaled
        else "differs from the embedding"
    )
    return IntegrityFinding(
        "tied_head_differs",
        "warn",
        f"config.json ties the head to the embedding, but the stored '{head}' {what} on "
        f"{int(bad.sum())} of {len(ids)} new rows: a loader that ties drops it (and emits "
        "with the embedding's rows), one that does not keeps both; save with "
        "tie_word_embeddings matching what was trained",
        token_group(ckpt, ids[bad]),
        int(bad.sum()),
    )


def head_not_moved(
    inputs: UntrainedRows | None, head: UntrainedRows | None, n_new: int
) -> IntegrityFinding | None:
    """An untied head whose new rows barely moved since ``--reference`` while the input rows did."""
    if inputs is None or head is None or head.movement is None or inputs.movement is None:
        return None
    still = head.barely_moved.size if head.barely_moved else 0
    moved_in = n_new - (inputs.barely_moved.size if inputs.barely_moved else 0)
    if still < n_new or moved_in == 0:
        return None
    return IntegrityFinding(
        "head_not_moved",
        "warn",
        f"the untied output head's {n_new} new rows barely moved since the reference while "
        f"{moved_in} input rows did: the head was frozen or not saved, so the model cannot "
        "emit the tokens it learned to read (train lm_head too, e.g. PEFT modules_to_save)",
        head.barely_moved,
        still,
    )


def padding_rows(
    ckpt: Checkpoint, norm_median: float | None, held: list[MatrixRows] | None = None
) -> IntegrityFinding | None:
    """Rows past the tokenizer's length that are not new tokens: count, norm, samplable?
    ``held``: what measuring each matrix read (its padding rows; else read here)."""
    ids = ckpt.padding_ids()  # none without a tokenizer or a matrix
    if not len(ids):
        return None
    emb = ckpt.matrices[0]
    n_tok = len(ckpt.tokenizer)
    if len(ids) > MAX_PADDING_ROWS:
        return IntegrityFinding(
            "padding_rows",
            "note",
            f"{len(ids)} rows past the tokenizer's {n_tok} tokens (not read: too many)",
            count=int(len(ids)),
        )
    head = ckpt.matrices[1] if len(ckpt.matrices) > 1 else emb
    pads = [h.padding for h in held] if held is not None else [None] * len(ckpt.matrices)
    rows = pads[0] or read_padding(ckpt, emb)
    head_rows = rows if head is emb else (pads[1] or read_padding(ckpt, head))
    relative = (
        f", median norm {quantile(rows.norms, 0.5) / norm_median:.3g}x the vocabulary's"
        if norm_median
        else ""
    )
    live = head_rows.live
    where = "output head" if head is not emb else "tied embedding"
    if not live.any():
        return IntegrityFinding(
            "padding_rows",
            "note",
            f"{len(ids)} padding rows past the tokenizer's {n_tok} tokens (ids {int(ids[0])}.."
            f"{int(ids[-1])}){relative}; their {where} rows are zero",
            count=int(len(ids)),
        )
    return IntegrityFinding(
        "padding_rows",
        "warn",
        f"{len(ids)} padding rows past the tokenizer's {n_tok} tokens (ids {int(ids[0])}.."
        f"{int(ids[-1])}){relative}; {int(live.sum())} of their {where} rows are not zero, "
        "so the model can sample ids no tokenizer decodes (mask them, or zero those head rows)",
        count=int(len(ids)),
    )


def on_padding(ckpt: Checkpoint, inputs: UntrainedRows | None) -> IntegrityFinding | None:
    """New tokens below a padded vocabulary's unused rows, without --base: what the padding
    comparison could not settle (the rows it found alike are untrained findings)."""
    pad = ckpt.padding_ids()
    if ckpt.base is not None or inputs is None or not len(pad) or not len(ckpt.new.ids):
        return None
    if inputs.like_padding is not None:
        return None
    # gti's sidecar records the base's row count: new ids past it lie on no base padding row.
    base_rows = ckpt.provenance.get("base_embedding_rows")
    if isinstance(base_rows, int) and base_rows <= int(ckpt.new.ids.min()):
        return None
    n_tok = len(ckpt.tokenizer)
    cmp = inputs.padding
    if cmp is None:
        settled = f"too few rows on one side (< {MIN_PADDING_ROWS}) to compare their norms"
    elif cmp.p_padding_vs_vocabulary >= PADDING_ALPHA:
        settled = "the padding rows' norms are like the vocabulary's, so norms cannot tell"
    else:
        settled = (
            f"their norms differ from those rows' (KS p = {cmp.p_new_vs_padding:.2g}): they "
            "moved off such values, or never had them"
        )
    return IntegrityFinding(
        "on_padding",
        "note",
        f"the matrix has {len(pad)} unused rows past the tokenizer's {n_tok} tokens, and the "
        f"new tokens (ids {int(ckpt.new.ids.min())}..{int(ckpt.new.ids.max())}) lie below them: "
        "they may sit on padding rows the base already had, which resize_token_embeddings "
        f"leaves as they were; {settled}; pass --base BASE to compare each row with the base's",
        count=int(len(pad)),
    )


def isotropic_draw(ckpt: Checkpoint, u: UntrainedRows | None) -> IntegrityFinding | None:
    """New rows shaped like a random draw, of no scale or center the files explain."""
    if u is None or u.draw is None or u.draw.kind != "isotropic" or ckpt.reference is not None:
        return None
    d = u.draw
    return IntegrityFinding(
        "isotropic_draw",
        "warn",
        f"the {d.n_rows} new rows look like an isotropic random draw: {d.share:.3g} of their "
        f"energy lies in the vocabulary's top principal directions, as for a draw "
        f"({d.expected:.3g}; p = {d.p_isotropic:.2g}), where trained rows carry the "
        f"vocabulary's anisotropy; not the model's initializer ({d.sigma_source}) nor noise "
        "around the vocabulary mean, so whether they trained cannot be told from this file: "
        "pass --reference INIT (the checkpoint they started from) or --base BASE",
        count=d.n_rows,
    )


def indicator_unjudged(u: UntrainedRows | None) -> IntegrityFinding | None:
    """Rows marked unused that the under-trained indicator cannot judge against."""
    if u is None or u.indicator is None or u.indicator.judged:
        return None
    ind = u.indicator
    return IntegrityFinding(
        "indicator_unjudged",
        "note",
        f"the files mark {ind.n_unused} rows unused ({', '.join(ind.unused_sources)}), but "
        f"the under-trained indicator ({ind.indicator}) cannot judge the new rows against "
        f"them: {ind.reason}; pass --reference INIT or --base BASE to measure the new rows "
        "from a before",
        count=ind.n_unused,
    )


def embedding_scale(ckpt: Checkpoint) -> IntegrityFinding | None:
    scale = input_scale(ckpt.config)
    if scale == 1.0:
        return None
    return IntegrityFinding(
        "embedding_scale",
        "note",
        f"{ckpt.config.get('model_type')}: the forward pass multiplies the input embedding by "
        f"sqrt(d) = {scale:.4g}; the stored rows are compared as stored (the head, tied or "
        "not, is not scaled)",
    )


def adapter_server(ckpt: Checkpoint) -> IntegrityFinding | None:
    changes = (ckpt.adapter or {}).get("embedding_changes") or {}
    hit = {name: kinds for name, kinds in changes.items() if any(k in kinds for k in SERVER_KINDS)}
    if not hit:
        return None
    what = "; ".join(f"{name}: {kinds}" for name, kinds in hit.items())
    return IntegrityFinding(
        "adapter_server",
        "warn",
        f"the adapter changes the embedding in a way common servers do not load ({what}): "
        "vLLM loads LoRA weights, not modules_to_save or trainable_tokens_delta; merge "
        "first (PeftModel.merge_and_unload(), then save_pretrained) and serve the merged model",
    )


def special_tokens_left_out(ckpt: Checkpoint, matrices: list) -> IntegrityFinding | None:
    """The added special tokens that are not new tokens and lie past the base vocabulary,
    or that the chat template or the data feed, named (module docstring): the fed ones are
    judged with the fed tokens, and said to be."""
    tok, new = ckpt.tokenizer, ckpt.new
    if tok is None or new.source != "tokenizer":
        return None
    fed = [m.fed for m in matrices if m.fed is not None]
    fed_special = {t for f in fed for t in f.special}
    new_ids = set(new.ids.tolist())
    special = [
        t
        for t in tok.added
        if t.special
        and t.id not in new_ids
        and (t.id >= new.base_vocab_size or t.content in fed_special)
    ]
    if not special:
        return None
    names = list_names([t.content for t in special[:4]], len(special))
    message = (
        f"{len(special)} added special token(s) not measured as new tokens ({names}): the "
        "new tokens are the tokenizer's added non-special ones, and special tokens cannot "
        "be told from the base's own without --base BASE, which measures every token absent "
        "from the base, special or not"
    )
    if fed_special:
        untrained = {t.token for f in fed for t in f.tokens} & fed_special
        sources = " and ".join(fed[0].sources)
        message += f"; {', '.join(sorted(fed_special))} fed by {sources}: " + (
            f"{', '.join(sorted(untrained))} never trained (n_untrained)"
            if untrained
            else "their rows are judged trained"
        )
    return IntegrityFinding("special_tokens_left_out", "note", message, count=len(special))


def integrity(
    ckpt: Checkpoint, matrices: list, held: list[MatrixRows] | None = None
) -> list[IntegrityFinding]:
    """Every integrity finding of ``ckpt``; ``matrices``: its MatrixReports, input first;
    ``held``: the rows measuring them read (MatrixRows, same order), not read again."""
    inputs = matrices[0].untrained if matrices else None
    head = matrices[1].untrained if len(matrices) > 1 else None
    vocab_norms = matrices[0].vocabulary_norms if matrices else None
    found = [
        tied_head_differs(ckpt, held[0] if held else None),
        head_not_moved(inputs, head, matrices[0].n_new) if head is not None else None,
        padding_rows(ckpt, (vocab_norms or {}).get("p50"), held),
        on_padding(ckpt, inputs),
        isotropic_draw(ckpt, inputs),
        indicator_unjudged(inputs),
        indicator_unjudged(head),
        embedding_scale(ckpt),
        adapter_server(ckpt),
        special_tokens_left_out(ckpt, matrices),
    ]
    return [f for f in found if f is not None]
