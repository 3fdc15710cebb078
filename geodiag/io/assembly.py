"""One assembly for every route: what a checkpoint's new rows are, and what is known of them.

Every route that reaches a verdict (``geodiag check`` on a path or a URL, ``geodiag.check``
and ``geodiag.measure`` on a path or on a model in memory, the Trainer callback, ``report``,
the Action, pre-commit) opens its rows one way (:class:`Opened`: files on disk, a URL's
byte ranges, or a model's modules in memory) and then builds its
:class:`~geodiag.io.checkpoint.Checkpoint` here, through the same chain of steps
(:data:`ASSEMBLY`, in this order; each reads what the earlier ones set):

1. ``config_and_tokenizer``: a GGUF's own metadata and token list, else ``config.json`` and
   ``tokenizer.json`` beside the weights; in memory the model's config, and the folder's
   tokenizer when it names the same added tokens as the tokenizer object (else the
   object's own);
2. ``matrices``: the input embedding and an untied output head
   (:mod:`geodiag.io.formats.tensor_names`); in memory, the model's as it computes them;
3. ``sid_maps``: gti's ``semantic_ids.json`` (``--sidecar``, else beside the weights) and a
   framework's SID map (``--sids``, else one beside under its framework's usual name). A
   framework's map stands for the levels and items; the sidecar's provenance (its init
   strategy, the init checkpoint the reference comes from) stays: information only adds;
4. ``new_tokens``: :mod:`geodiag.io.vocabulary.new_tokens`' resolvers. New ids named in
   Python that are exactly the SID map's take its levels, codes and items;
5. ``codebooks``: ``--codebooks FILE``, the framework's beside its map, else
   ``codebooks.safetensors`` beside the weights, else beside the sidecar;
6. ``notes``: what the reader decided that the user should know.

:func:`geodiag.io.checkpoint.checkpoint_of` makes the checkpoint of the result; the
reference the rows' movement is measured from is the caller's to resolve
(:func:`geodiag.io.checkpoint.with_reference`: ``--reference``, else what the files carry).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.gguf import GGUFStore
from geodiag.io.formats.peft_adapter import AdapterInfo
from geodiag.io.formats.store import FLOAT_DTYPES, is_float
from geodiag.io.formats.tensor_names import (
    Head,
    find_input_tensor,
    find_output_head,
    stated_widths,
)
from geodiag.io.formats.tensor_store import TensorStore
from geodiag.io.sources.options import ReadOptions
from geodiag.io.vocabulary import sidecar as sidecar_mod
from geodiag.io.vocabulary.codebooks import codebook_rows, codebooks_of, file_digest, level_sizes
from geodiag.io.vocabulary.new_tokens import (
    Declared,
    NewTokens,
    Sources,
    absent_from,
    from_sidecar,
    resolve_new_tokens,
)
from geodiag.io.vocabulary.sid_index import ForeignSids, open_foreign
from geodiag.io.vocabulary.tokenizer import TokenizerInfo, gguf_tokenizer, load_tokenizer_in
from geodiag.jsonio import read_json_object


@dataclass
class Matrix:
    """One embedding matrix to analyze: the input embedding, or an untied output head."""

    role: str  # "input" | "output"
    tensor: str
    dtype: str
    n_rows: int
    dim: int


@dataclass
class Opened:
    """What opening the rows gave, before anything is decided about them."""

    path: Path  # the checkpoint (a URL's small files: the folder they were fetched into)
    store: TensorStore
    roots: list[Path]  # the folders its files are looked up in, first match wins
    location: str  # as shown: the path, the URL as given, or what is in memory
    adapter: AdapterInfo | None = None
    remote: bool = False
    notes: list[str] = field(default_factory=list)
    base: object | None = None  # --base (geodiag.io.checkpoint.BaseCheckpoint)
    # In memory: what the model says of itself, over what its folder's files say.
    config: dict | None = None
    tokenizer: TokenizerInfo | None = None  # the tokenizer object's, when one was given
    names: object | None = None  # names rows in memory (a transformers tokenizer)
    matrices: list | None = None  # [Matrix]: the model's matrices as it computes them
    tied: bool | None = None


@dataclass
class Draft:
    """The checkpoint being assembled: each step of :data:`ASSEMBLY` fills its part."""

    opened: Opened
    opts: ReadOptions
    declared: Declared | None
    config: dict = field(default_factory=dict)
    tokenizer: TokenizerInfo | None = None
    matrices: list = field(default_factory=list)
    head: Head | None = None
    head_left_out: object | None = None
    tied: bool = True
    sidecar: sidecar_mod.SemanticIds | None = None  # the SID map in use (levels, items)
    sidecar_path: Path | None = None
    own_sidecar: sidecar_mod.SemanticIds | None = None  # gti's, when a framework's map is in use
    foreign: ForeignSids | None = None
    new: NewTokens | None = None
    codebooks: dict = field(default_factory=dict)
    codebooks_path: Path | None = None
    codebooks_note: str | None = None
    codebook_digest: str | None = None
    notes: list[str] = field(default_factory=list)

    def found(self, name: str) -> Path | None:
        """The first root holding the file ``name`` (None: none does, or no root)."""
        return next((r / name for r in self.opened.roots if (r / name).is_file()), None)

    def beside(self, name: str) -> Path:
        """:meth:`found`, else where it would be: the first root's (a name no file has in
        memory without a folder)."""
        roots = self.opened.roots
        return self.found(name) or (roots[0] if roots else Path("<no folder>")) / name

    @property
    def trainable(self) -> np.ndarray | None:
        """A PEFT adapter's trainable-token indices on the input embedding."""
        adapter = self.opened.adapter
        patch = adapter.patches.get(self.matrices[0].tensor) if adapter is not None else None
        return patch.token_indices if patch is not None else None


def config_and_tokenizer(d: Draft) -> None:
    """config.json and tokenizer.json beside the weights; a GGUF file carries its own
    (its metadata and token list), which win over files that happen to sit beside it. In
    memory, the model's config; the tokenizer object's added tokens over a folder's file
    that names others (the folder then does not describe the model's vocabulary)."""
    o = d.opened
    if isinstance(o.store, GGUFStore):
        d.config, d.tokenizer = o.store.config(), gguf_tokenizer(o.store)
        return
    config = d.found("config.json")
    d.config = o.config if o.config is not None else read_json_object(config) if config else {}
    found = load_tokenizer_in(d.beside)
    given = o.tokenizer
    if given is None or (found is not None and _same_added(found, given)):
        d.tokenizer = found
    else:
        d.tokenizer = given
        if found is not None:
            d.notes.append(
                f"{found.path} names other added tokens than the tokenizer given: the "
                "tokenizer given names the new rows"
            )


def _same_added(a: TokenizerInfo, b: TokenizerInfo) -> bool:
    return [(t.id, t.content, t.special) for t in a.added] == [
        (t.id, t.content, t.special) for t in b.added
    ]


def matrices(d: Draft) -> None:
    """(the input embedding [, the untied head]), the head as the files say it, an untied
    head left out; in memory, the model's matrices."""
    o = d.opened
    if o.matrices is not None:
        d.matrices, d.tied = list(o.matrices), bool(o.tied)
        return
    store, config, opts = o.store, d.config, d.opts
    input_name = find_input_tensor(store, o.path, opts.tensor, config)
    found = find_output_head(store, input_name, config)
    if found.stored is not None and found.stored in _saved_by_adapter(o.adapter):
        found = find_output_head(store, input_name, config, untied_by_adapter=True)
    head_name = None if opts.all_rows_new else found.analyzed  # --all-rows-new: a table
    out = []
    for role, name in (("input", input_name), ("output", head_name)):
        if name is None:
            continue
        shape, dtype, where = store.shape(name), store.dtype(name), store.file_of(name)
        if len(shape) != 2:
            raise InputError(
                where, f"tensor '{name}' has shape {list(shape)}, expected [vocab, hidden]"
            )
        if not (is_float(dtype) or getattr(store, "dequantizes", False)):
            raise InputError(
                where, f"tensor '{name}' has dtype {dtype}; expected {', '.join(FLOAT_DTYPES)}"
            )
        widths = stated_widths(config, shape[0])
        if widths and shape[1] not in widths:
            said = ", ".join(map(str, sorted(widths)))
            raise InputError(
                where, f"tensor '{name}' is {list(shape)} but config.json says hidden_size {said}"
            )
        out.append(Matrix(role, name, dtype, shape[0], shape[1]))
    # An untied head whose rows differ from the embedding's (a base resized in memory
    # before PEFT wrapped it, which saved the embedding but not the head; an embedding
    # replaced by hand): not analyzed, and the audit's head_rows finding says why.
    if len(out) == 2 and out[1].n_rows != out[0].n_rows:
        d.head_left_out = out.pop()
    d.matrices, d.head, d.tied = out, found, found.tied


def _saved_by_adapter(adapter: AdapterInfo | None) -> set[str]:
    """The tensors an adapter saves its own copy of (``modules_to_save``)."""
    if adapter is None:
        return set()
    return {n for n, p in adapter.patches.items() if p.full_kind == "modules_to_save"}


def sid_maps(d: Draft) -> None:
    """gti's sidecar and a framework's SID map; the map in use names the levels and items,
    the sidecar's provenance stays beside it (module docstring, step 3)."""
    opts, roots = d.opts, d.opened.roots
    declared = d.declared
    side_path = opts.sidecar or d.found(sidecar_mod.FILENAME)
    own = sidecar_mod.load(side_path) if side_path is not None else None
    d.sidecar, d.sidecar_path = own, side_path
    if declared is not None and declared.sids is not None:
        # Levels given as a SID map (a sidecar, a framework's map read in Python): it is the
        # map in use; the sidecar beside keeps its provenance.
        d.sidecar = declared.sids
        d.sidecar_path = declared.levels_path or Path(declared.where)
        d.own_sidecar = own if own is not None and declared.levels_path != side_path else None
        return
    if declared is not None and declared.by_level is not None:
        return  # levels given in Python as ids: the caller's
    if opts.sids is None and own is not None:
        return
    try:
        foreign = open_foreign(opts.sids, opts.codebooks, opts.sid_offset, roots, d.tokenizer)
    except InputError as e:
        if declared is None or opts.sids is not None:
            raise
        d.notes.append(f"SID map beside the weights not read ({e}): the new ids given stand")
        return
    if foreign is None:
        return
    d.foreign, d.sidecar, d.sidecar_path = foreign, foreign.sids, foreign.map_path
    if own is not None:
        d.own_sidecar = own
        d.notes.append(
            f"SID map: {foreign.map_path.name} (--sids) names the levels and items; "
            f"{side_path.name}'s provenance (init strategy, init checkpoint) still applies"
        )


def new_tokens(d: Draft) -> None:
    """The resolvers' answer; new ids named in Python that are exactly the SID map's rows
    take its levels, codes and items (what the path route knows of the same rows)."""
    o, declared = d.opened, d.declared
    if _names_map_rows(d):
        declared = None  # the map's resolver answers, with its levels
    sources = Sources(
        root=o.path,
        opts=d.opts,
        n_rows=d.matrices[0].n_rows,
        tokenizer=d.tokenizer,
        sidecar=d.sidecar,
        sidecar_path=d.sidecar_path if d.sidecar else None,
        trainable=d.trainable,
        base_tokenizer=_base_tokenizer(d),
        declared=declared,
    )
    d.new = resolve_new_tokens(sources)
    if d.new.source == "flag" and _flag_names_map_rows(d):
        flag = "--new-tokens" if d.opts.new_tokens is not None else "--base-vocab-size"
        d.new = from_sidecar(sources)  # the same rows: the map's levels and items apply
        d.notes.append(
            f"new rows: {flag} names the rows {d.sidecar_path.name} names; its levels and "
            "items apply"
        )
    if declared is None and d.declared is not None:
        d.notes.append(
            f"the new ids given are the rows {d.sidecar_path.name} names: its levels and "
            "items apply"
        )
        d.declared = None


def _names_map_rows(d: Draft) -> bool:
    """The rows named in Python are the SID map's: new ids that are exactly its rows, or
    levels read from the sidecar itself, with no other base vocabulary size."""
    side, declared = d.sidecar, d.declared
    if side is None or declared is None or not side.has_token_ids:
        return False
    if declared.by_level is not None:
        return declared.sids is side and declared.base_vocab_size == side.base_vocab_size
    rows = {t for lv in side.levels for t in lv.token_ids if t >= 0}
    stated = declared.base_vocab_size
    return rows == set(declared.ids.tolist()) and stated in (None, side.base_vocab_size)


def _flag_names_map_rows(d: Draft) -> bool:
    """``--new-tokens`` / ``--base-vocab-size`` name exactly the SID map's rows, over the
    base vocabulary it states: a flag that repeats the map adds nothing, and takes nothing."""
    side, new = d.sidecar, d.new
    if side is None or not side.has_token_ids or d.trainable is not None:
        return False
    rows = {t for lv in side.levels for t in lv.token_ids if t >= 0}
    stated = side.base_vocab_size
    return rows == set(new.ids.tolist()) and stated in (None, new.base_vocab_size)


def _base_tokenizer(d: Draft) -> TokenizerInfo | None:
    """The tokenizer new tokens are told from: ``--base``'s, or, for an adapter that saved
    a tokenizer of its own, its base's when the two differ (when they do not, the base was
    resized before PEFT: the adapter's trainable tokens say which rows are new)."""
    o, tok = d.opened, d.tokenizer
    base_tok = o.base.tokenizer if o.base is not None else None
    if o.adapter is not None and tok is not None and tok.path.parent == o.path:
        base_tok = load_tokenizer_in(lambda name: o.roots[1] / name)
        if base_tok is not None:
            base_tok = base_tok if absent_from(tok, base_tok) else None
    return base_tok


def codebooks(d: Draft) -> None:
    """The codebook vectors of each new token's code: a framework's beside its map, else
    ``--codebooks`` / ``codebooks.safetensors`` beside the weights. Rows named in Python
    take the caller's codebooks (:mod:`geodiag.api`)."""
    if d.declared is not None:
        return
    foreign, new = d.foreign, d.new
    if foreign is not None and foreign.codebooks_path is not None:
        path = foreign.codebooks_path
        d.codebooks, d.codebooks_note = codebook_rows(
            foreign.codebooks, new, path, path.name, sizes=level_sizes(new, d.sidecar)
        )
        d.codebooks_path, d.codebook_digest = path, file_digest(path)
        return
    name = sidecar_mod.CODEBOOKS_FILENAME
    path = d.opts.codebooks or d.found(name)
    if path is None and d.sidecar_path is not None and (d.sidecar_path.parent / name).is_file():
        path = d.sidecar_path.parent / name  # beside the sidecar given (levels=, --sidecar)
    if path is None and not d.opened.roots:  # in memory, no folder: the caller's to give
        d.codebooks_note = "no codebooks given (codebooks=): RSA skipped"
        return
    path = path or d.beside(name)
    sizes = level_sizes(new, d.sidecar)
    d.codebooks, d.codebooks_note, d.codebook_digest = codebooks_of(path, d.opts, new, sizes)
    d.codebooks_path = path if d.codebooks else None


def notes(d: Draft) -> None:
    """What the reader decided that the user should know: rows left out, rows taken from
    elsewhere than expected, a head untied by the adapter."""
    o, new, head = d.opened, d.new, d.head
    side = None if d.declared is not None else d.sidecar
    side_name = d.sidecar_path.name if d.sidecar_path is not None else sidecar_mod.FILENAME
    trainable = None if d.declared is not None else d.trainable
    said = [*o.notes, *(o.adapter.notes if o.adapter else [])]
    said += d.foreign.notes if d.foreign is not None and d.declared is None else []
    if new.source == "base":
        said.append(f"new rows: the {len(new.ids)} tokens absent from the base's tokenizer")
    if head is not None and head.untied_by_adapter and d.config.get("tie_word_embeddings"):
        said.append(
            "the adapter saves its own copy of the output head (modules_to_save): the merged "
            "model's head is no longer tied to the embedding, so both are analyzed"
        )
    if trainable is not None and new.source == "sidecar":
        said.append(f"new rows: the adapter's trainable tokens, levels from {side_name}")
    elif trainable is not None and side is not None and new.source == "adapter":
        said.append(f"the adapter's trainable tokens are not the rows {side_name} names")
    if side is not None and side.has_token_ids and new.source == "flag":
        said.append(f"new rows taken from the command-line flag, not from {side_name}")
    if side is not None and not side.has_token_ids:
        said.append(f"{side_name} has no token ids yet (written before vocabulary extension)")
    d.notes = said + d.notes


Step = Callable[[Draft], None]

# The order of the assembly: the module docstring's.
ASSEMBLY: tuple[Step, ...] = (
    config_and_tokenizer,
    matrices,
    sid_maps,
    new_tokens,
    codebooks,
    notes,
)


def assemble(opened: Opened, opts: ReadOptions, declared: Declared | None) -> Draft:
    """``opened`` through :data:`ASSEMBLY`; :func:`geodiag.io.checkpoint.checkpoint_of`
    makes the checkpoint of it, and the caller sets its reference."""
    d = Draft(opened, opts, declared)
    for step in ASSEMBLY:
        step(d)
    return d
