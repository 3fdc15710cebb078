"""Open a checkpoint and find its new-token rows, without instantiating the model.

Resolution order (DESIGN.md, checkpoint contract):
- weights: a PEFT adapter folder over its base (``geodiag.io.formats.peft_adapter``), else a
  safetensors file, a sharded set, a torch state dict or a GGUF file (``geodiag.io.formats.store``;
  a GGUF's metadata and token list stand for config.json and tokenizer.json); files
  beside them (config, tokenizer, sidecar, codebooks) from the adapter's folder first,
  else its base's;
- tensors: ``--tensor`` override, else the 2-D tensor named like a token table whose
  rows are a vocabulary size config.json states; the output head (the other such
  tensor of the LM) is analyzed on its own when it is not tied (``geodiag.io.formats.tensor_names``);
- new rows: one resolver per source, in the order ``geodiag.io.vocabulary.new_tokens`` states
  (arguments, flags, sidecar, all rows, adapter, ``--base``, tokenizer);
- levels: the sidecar, else token names matching ``--level-pattern``, else none;
- codebooks: ``--codebooks FILE``, else ``codebooks.safetensors`` beside the weights;
- the reference the movement is measured from: ``--reference``, else a before the files
  carry (``geodiag.io.vocabulary.references``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.gguf import GGUFStore
from geodiag.io.formats.peft_adapter import AdapterInfo, is_adapter, open_adapter
from geodiag.io.formats.registry import open_base as open_adapter_base
from geodiag.io.formats.registry import open_remote, open_store
from geodiag.io.formats.store import FLOAT_DTYPES, is_float
from geodiag.io.formats.tensor_names import (
    Head,
    find_input_tensor,
    find_output_head,
    stated_widths,
)
from geodiag.io.formats.tensor_store import TensorStore
from geodiag.io.sources.layouts import FSDP_SUBFOLDERS, dcp_folder, resolve_hub_cache, zero_folder
from geodiag.io.sources.options import ReadOptions
from geodiag.io.sources.remote import is_remote
from geodiag.io.stack import detect_stack
from geodiag.io.vocabulary import sidecar as sidecar_mod
from geodiag.io.vocabulary.codebooks import (
    codebook_rows,
    codebooks_of,
    file_digest,
    level_sizes,
)
from geodiag.io.vocabulary.new_tokens import (
    Declared,
    NewTokens,
    Sources,
    absent_from,
    resolve_new_tokens,
)
from geodiag.io.vocabulary.references import reference_of
from geodiag.io.vocabulary.sid_index import open_foreign
from geodiag.io.vocabulary.tokenizer import TokenizerInfo, gguf_tokenizer, load_tokenizer_in
from geodiag.jsonio import read_json_object

# Unused padding rows read at most (their integrity finding, the padding comparison of the
# new rows): past this many, they are counted and no row is read.
MAX_PADDING_ROWS = 100_000


@dataclass
class Matrix:
    """One embedding matrix to analyze: the input embedding, or an untied output head."""

    role: str  # "input" | "output"
    tensor: str
    dtype: str
    n_rows: int
    dim: int


@dataclass
class BaseCheckpoint:
    """The base a checkpoint was extended from (``--base``): its tokenizer says which
    tokens are new, its weights (when present) which new ids landed on padding rows."""

    path: Path
    tokenizer: TokenizerInfo
    store: TensorStore | None

    def padding_mask(self, tensor: str, ids: np.ndarray) -> np.ndarray | None:
        """(n,) bool: ids past the base's tokenizer but inside its matrix ``tensor``."""
        if self.store is None or tensor not in self.store.names():
            return None
        n_rows = self.store.shape(tensor)[0]
        return (ids >= len(self.tokenizer)) & (ids < n_rows)


def open_base(base: Path) -> BaseCheckpoint:
    """``--base`` for a checkpoint that is not an adapter: its tokenizer, and its weights."""
    base = resolve_hub_cache(base)[0] if base.exists() else base
    root = base if base.is_dir() else base.parent
    if not base.exists():
        raise InputError("--base", f"{base}: no such file or folder")
    tokenizer = load_tokenizer_in(lambda name: root / name)
    if tokenizer is None:
        raise InputError(
            "--base",
            f"{base}: no tokenizer.json (nor tokenizer.model), so the tokens added since "
            "cannot be told apart (pass the base's save_pretrained folder, or --new-tokens "
            "START:END)",
        )
    try:
        store = open_store(base)
    except InputError:
        store = None  # a tokenizer-only folder still says which tokens are new
    return BaseCheckpoint(base, tokenizer, store)


@dataclass
class Checkpoint:
    path: Path
    store: TensorStore
    config: dict
    tokenizer: TokenizerInfo | None
    sidecar: sidecar_mod.SemanticIds | None
    new: NewTokens
    matrices: list[Matrix]
    tied: bool
    codebooks: dict[str, np.ndarray]
    codebooks_path: Path | None
    codebooks_note: str | None
    notes: list[str] = field(default_factory=list)
    adapter: dict = field(default_factory=dict)  # a PEFT adapter's provenance, when one was read
    stack: dict = field(default_factory=dict)  # which training stack wrote it (stack.py)
    base: BaseCheckpoint | None = None  # --base on a checkpoint that is not an adapter
    # An untied head whose rows differ from the embedding's: not analyzed (the audit's
    # head_rows finding, geodiag.analysis.audit)
    head_left_out: Matrix | None = None
    # The output head as the files say it: stored where, tied or not, and why
    # (geodiag.io.formats.tensor_names.find_output_head); None for rows given in memory.
    head: Head | None = None
    # What the new rows' movement is measured from: --reference, else a before the files
    # carry (geodiag.io.vocabulary.references); and which one and why, or why none, for the report.
    reference: Checkpoint | None = None
    reference_notes: list[str] = field(default_factory=list)
    # The options it was read with: the one home of every reading flag (allow_nonfinite
    # among them), so nothing downstream keeps a copy that could disagree.
    read: ReadOptions = field(default_factory=ReadOptions)
    # The folders its files are looked up in, first match wins (the weights', then a
    # PEFT adapter's base): where the tokenizer's config and chat template sit.
    roots: list[Path] = field(default_factory=list)
    # The checkpoint as shown in reports: the path, or the URL as given (geodiag.io.sources.remote;
    # ``path`` is then the folder its small files were fetched into).
    location: str = ""
    remote: bool = False  # read over HTTP: each row read costs its bytes
    _codebook_digest: str | None = None

    def use_reference(self, ref: Checkpoint, why: str) -> None:
        """Measure the movement from ``ref`` (same new tokens), ``why`` saying whose it is."""
        self.reference, self.reference_notes = (
            ref,
            [f"reference: {ref.location or ref.path} ({why})"],
        )

    def base_padding_rows(
        self, matrix: Matrix, ids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(mask over ``ids``, the base's rows at those ids) for new ids that were padding
        rows in the base: past its tokenizer, inside its matrix. None without a base."""
        if self.base is None:
            return None
        mask = self.base.padding_mask(matrix.tensor, ids)
        if mask is None or not mask.any():
            return None
        return mask, self.base.store.read_rows(matrix.tensor, ids[mask])

    def padding_ids(self) -> np.ndarray:
        """(k,) ids of the rows past the tokenizer's length that no new token uses: a
        padded vocabulary's unused rows (none without a tokenizer)."""
        if self.tokenizer is None or not self.matrices or not hasattr(self.tokenizer, "__len__"):
            return np.zeros(0, np.int64)
        n_rows = self.matrices[0].n_rows
        # The tokenizer's length is its largest id + 1: an added token on the last row
        # says there is no row past it without decoding the whole vocabulary for it.
        added = getattr(self.tokenizer, "added", None) or []
        if max((t.id for t in added), default=-1) >= n_rows - 1:
            return np.zeros(0, np.int64)
        ids = np.arange(len(self.tokenizer), n_rows, dtype=np.int64)
        return ids[~np.isin(ids, self.new.ids)]

    @property
    def has_vocabulary(self) -> bool:
        """False when every row is new (--all-rows-new): nothing to compare with."""
        return self.new.base_vocab_size > 0

    def token(self, token_id: int) -> str:
        t = self.tokenizer.token(int(token_id)) if self.tokenizer is not None else None
        return t if t is not None else f"<id {int(token_id)}>"

    def read_rows(self, matrix: Matrix, ids: np.ndarray, float32: bool = False) -> np.ndarray:
        """Rows ``ids`` as float64, or float32 where that is exact and ``float32`` permits
        (the store decides: see TensorStore.read_rows)."""
        return self.store.read_rows(matrix.tensor, ids, float32)

    def iter_original(
        self,
        matrix: Matrix,
        chunk: int = 1024,
        float32: bool = True,
        spans: list[tuple[int, int]] | None = None,
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Original rows ``[0, base_vocab_size)`` (or only those of the ascending
        ``[start, stop)`` ``spans``: a sample's blocks) in blocks: memory stays at two blocks.
        A block never straddles two spans.

        Blocks come as float32 when that is exact (F32, F16, BF16 weights): half the bytes
        of float64 and no conversion. The next block is read (and hashed for the digest,
        which releases the GIL) in a helper thread while the caller scores this one.
        Block size: 1024 rows (2.4 MB at SmolLM2's width in float32); 2048 raised the
        run's peak by 5 MB and 4096 by 17 MB, at no measurable gain in time.
        """
        from concurrent.futures import ThreadPoolExecutor

        spans = [(0, self.new.base_vocab_size)] if spans is None else spans
        pieces = [(s, min(s + chunk, hi)) for lo, hi in spans for s in range(lo, hi, chunk)]

        def read(piece: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
            start, stop = piece
            rows = self.store.read_block(matrix.tensor, start, stop, float32=float32)
            return np.arange(start, stop, dtype=np.int64), rows

        if not pieces:
            return
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(read, pieces[0])
            for nxt in [*pieces[1:], None]:
                block = pending.result()
                if nxt is not None:
                    pending = pool.submit(read, nxt)
                yield block

    def digests(self) -> dict[str, str]:
        d = self.store.digests()
        if self.codebooks_path is not None and self._codebook_digest:
            d[str(self.codebooks_path)] = self._codebook_digest
        return d


def open_checkpoint(
    path: str | Path, opts: ReadOptions | None = None, declared: Declared | None = None
) -> Checkpoint:
    """Open a checkpoint folder, weights file or PEFT adapter folder and resolve everything
    but the row values, in the module docstring's order. ``declared``: new tokens named in
    Python (the API), over every flag and file; their codebooks are the caller's to give."""
    opts = opts or ReadOptions()
    location = None
    if is_remote(path):  # its small files fetched into a folder, its weights read by ranges
        remote = open_remote(str(path))
        path, hub_note, location = remote.folder, None, remote.where
        store, adapter, roots = remote.store, None, remote.roots
        if store is None:  # an adapter folder: read over its base, local or by URL
            adapter, store = open_adapter(path, opts.base, open_adapter_base, remote)
            roots.append(adapter.base_root)
    else:
        path, hub_note = resolve_hub_cache(Path(path))
        store, adapter, roots = _open_weights(path, opts)
    if adapter is None and is_remote(opts.base):
        raise InputError(
            "--base",
            f"{opts.base}: a URL is read as a PEFT adapter's base only; to tell new tokens "
            "from a base's tokenizer, pass its local folder",
        )
    base_ckpt = open_base(Path(opts.base)) if adapter is None and opts.base is not None else None
    beside = _finder(roots)
    config, tok = _config_and_tokenizer(store, beside)

    matrices, head, head_left_out = _matrices(store, path, config, opts, adapter)
    side_path = opts.sidecar or beside(sidecar_mod.FILENAME)
    side = sidecar_mod.load(side_path) if (opts.sidecar or side_path.is_file()) else None
    foreign = None
    if declared is None and (opts.sids is not None or side is None):
        foreign = open_foreign(opts.sids, opts.codebooks, opts.sid_offset, roots, tok)
    if foreign is not None:  # a framework's SID map stands for the sidecar
        side, side_path = foreign.sids, foreign.map_path
    patch = adapter.patches.get(matrices[0].tensor) if adapter is not None else None
    trainable = patch.token_indices if patch is not None else None
    sources = Sources(
        root=path,
        opts=opts,
        n_rows=matrices[0].n_rows,
        tokenizer=tok,
        sidecar=side,
        sidecar_path=side_path if side else None,
        trainable=trainable,
        base_tokenizer=_base_tokenizer(path, roots, tok, adapter, base_ckpt),
        declared=declared,
    )
    new = resolve_new_tokens(sources)
    notes = [*([hub_note] if hub_note else []), *(adapter.notes if adapter else [])]
    book_path = opts.codebooks or beside(sidecar_mod.CODEBOOKS_FILENAME)
    if declared is None and foreign is not None and foreign.codebooks_path is not None:
        notes += foreign.notes + _notes(tok, new, side, side_path, trainable, head, config)
        book_path = foreign.codebooks_path
        books, book_note = codebook_rows(
            foreign.codebooks, new, book_path, book_path.name, sizes=level_sizes(new, side)
        )
        book_digest = file_digest(book_path)
    elif declared is None:
        notes += (foreign.notes if foreign else []) + _notes(
            tok, new, side, side_path, trainable, head, config
        )
        books, book_note, book_digest = codebooks_of(book_path, opts, new, level_sizes(new, side))
    else:  # the caller's rows: how the files would have named them does not apply
        notes += _notes(tok, new, None, side_path, None, head, config)
        books, book_note, book_digest = {}, None, None
    provenance = adapter.provenance() if adapter is not None else None
    ckpt = Checkpoint(
        path=path,
        store=store,
        config=config,
        tokenizer=tok,
        sidecar=side,
        new=new,
        matrices=matrices,
        tied=head.tied,
        codebooks=books,
        codebooks_path=book_path if books else None,
        codebooks_note=book_note,
        notes=notes,
        adapter=provenance or {},
        stack=detect_stack(roots, config, side.provenance if side else None, provenance),
        base=base_ckpt,
        head_left_out=head_left_out,
        head=head,
        read=opts,
        roots=roots,
        location=location or str(path),
        # Rows read over the network: a URL's, or an adapter's over a base given by URL.
        remote=location is not None or (adapter is not None and is_remote(adapter.base_path)),
        _codebook_digest=book_digest,
    )
    ckpt.reference, ckpt.reference_notes = reference_of(ckpt, opts, declared, open_checkpoint)
    return ckpt


def _open_weights(
    path: Path, opts: ReadOptions
) -> tuple[TensorStore, AdapterInfo | None, list[Path]]:
    """(store, the adapter when ``path`` is one, the folders to look beside: first wins)."""
    if is_adapter(path):
        adapter, store = open_adapter(path, opts.base, open_adapter_base)
        # Files beside the weights: the adapter folder's own first, else the base's.
        return store, adapter, [path, adapter.base_root]
    roots = [path if path.is_dir() else path.parent]
    if path.is_dir() and path.match(FSDP_SUBFOLDERS) and dcp_folder(path):
        roots.append(path.parent)  # pytorch_model_fsdp_0/: config and tokenizer sit above
    elif path.is_dir() and zero_folder(path):
        roots.append(path.parent)  # DeepSpeed's global_stepN/ (or universal/): likewise
    return open_store(path), None, roots


def _config_and_tokenizer(
    store: TensorStore, beside: Callable[[str], Path]
) -> tuple[dict, TokenizerInfo | None]:
    """config.json and tokenizer.json beside the weights; a GGUF file carries its own
    (its metadata and token list), which win over files that happen to sit beside it."""
    if isinstance(store, GGUFStore):
        return store.config(), gguf_tokenizer(store)
    config = read_json_object(beside("config.json")) if beside("config.json").is_file() else {}
    return config, load_tokenizer_in(beside)


def _finder(roots: list[Path]) -> Callable[[str], Path]:
    """``beside(name)``: the first root holding the file ``name``, else the first root's path."""

    def beside(name: str) -> Path:
        return next((r / name for r in roots if (r / name).is_file()), roots[0] / name)

    return beside


def _saved_by_adapter(adapter: AdapterInfo | None) -> set[str]:
    """The tensors an adapter saves its own copy of (``modules_to_save``)."""
    if adapter is None:
        return set()
    return {n for n, p in adapter.patches.items() if p.full_kind == "modules_to_save"}


def _matrices(
    store: TensorStore,
    path: Path,
    config: dict,
    opts: ReadOptions,
    adapter: AdapterInfo | None,
) -> tuple[list[Matrix], Head, Matrix | None]:
    """(the input embedding [, the untied head], the head as the files say it, an untied
    head left out)."""
    input_name = find_input_tensor(store, path, opts.tensor, config)
    found = find_output_head(store, input_name, config)
    if found.stored is not None and found.stored in _saved_by_adapter(adapter):
        found = find_output_head(store, input_name, config, untied_by_adapter=True)
    head_name = found.analyzed
    if opts.all_rows_new:
        head_name = None  # a separate table of new tokens; the LM's head is another matter
    matrices = []
    for role, name in (("input", input_name), ("output", head_name)):
        if name is None:
            continue
        shape, dtype = store.shape(name), store.dtype(name)
        where = store.file_of(name)
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
        matrices.append(Matrix(role, name, dtype, shape[0], shape[1]))
    # An untied head whose rows differ from the embedding's (a base resized in memory
    # before PEFT wrapped it, which saved the embedding but not the head; an embedding
    # replaced by hand): not analyzed, and the audit's head_rows finding says why.
    left_out = (
        matrices.pop() if len(matrices) == 2 and matrices[1].n_rows != matrices[0].n_rows else None
    )
    return matrices, found, left_out


def _base_tokenizer(
    path: Path,
    roots: list[Path],
    tok: TokenizerInfo | None,
    adapter: AdapterInfo | None,
    base_ckpt: BaseCheckpoint | None,
) -> TokenizerInfo | None:
    """The tokenizer new tokens are told from: ``--base``'s, or, for an adapter that saved
    a tokenizer of its own, its base's when the two differ (when they do not, the base was
    resized before PEFT: the adapter's trainable tokens say which rows are new)."""
    base_tok = base_ckpt.tokenizer if base_ckpt is not None else None
    if adapter is not None and tok is not None and tok.path.parent == path:
        base_tok = load_tokenizer_in(lambda name: roots[1] / name)
        if base_tok is not None:
            base_tok = base_tok if absent_from(tok, base_tok) else None
    return base_tok


def _notes(
    tok: TokenizerInfo | None,
    new: NewTokens,
    side: sidecar_mod.SemanticIds | None,
    side_path: Path,
    trainable: np.ndarray | None,
    head: Head,
    config: dict,
) -> list[str]:
    """What the reader decided that the user should know: rows left out, rows taken from
    elsewhere than expected, a head untied by the adapter."""
    notes = []  # the special tokens left out: integrity's special_tokens_left_out
    if new.source == "base":
        notes.append(f"new rows: the {len(new.ids)} tokens absent from the base's tokenizer")
    if head.untied_by_adapter and config.get("tie_word_embeddings"):
        notes.append(
            "the adapter saves its own copy of the output head (modules_to_save): the merged "
            "model's head is no longer tied to the embedding, so both are analyzed"
        )
    if trainable is not None and new.source == "sidecar":
        notes.append(f"new rows: the adapter's trainable tokens, levels from {side_path.name}")
    elif trainable is not None and side is not None and new.source == "adapter":
        notes.append(f"the adapter's trainable tokens are not the rows {side_path.name} names")
    if side is not None and side.has_token_ids and new.source == "flag":
        notes.append(f"new rows taken from the command-line flag, not from {side_path.name}")
    if side is not None and not side.has_token_ids:
        notes.append(f"{side_path.name} has no token ids yet (written before vocabulary extension)")
    return notes


def check_rows(
    ckpt: Checkpoint, matrix: Matrix, rows: np.ndarray, allow_nonfinite: bool
) -> np.ndarray:
    """Reject NaN/Inf rows (unless allowed: then they are dropped).

    All-zero rows are kept: they are untrained rows (a zero init, or rows a save never
    wrote), a finding of the analysis (geodiag.analysis.findings), measured as they are; the
    metrics whose cosine they leave undefined say so. Returns a boolean mask of the rows kept.
    """
    where = ckpt.store.file_of(matrix.tensor)
    # By blocks of rows: no (n, d) mask (100 MB at 100,000 x 1,024).
    finite = np.concatenate(
        [np.isfinite(rows[s : s + 4096]).all(axis=1) for s in range(0, len(rows), 4096)]
        or [np.ones(0, bool)]
    )
    if not finite.all():
        bad = ckpt.new.ids[~finite]
        if not allow_nonfinite:
            raise InputError(
                where,
                f"{bad.size} new-token rows of '{matrix.tensor}' hold NaN/Inf (ids {bad[:5].tolist()}); "
                "pass --allow-nonfinite to measure the rest",
            )
        if not finite.any():
            raise InputError(
                where,
                f"all {bad.size} new-token rows of '{matrix.tensor}' hold NaN/Inf (ids "
                f"{bad[:5].tolist()}): nothing left to measure with --allow-nonfinite",
            )
    return finite


def check_original_rows(
    ckpt: Checkpoint, matrix: Matrix, nonfinite: np.ndarray, allow_nonfinite: bool
) -> None:
    """Reject NaN/Inf original rows ``nonfinite`` (their ids) unless allowed, as
    :func:`check_rows` does for new ones: a prompt holding one of those tokens turns the
    model's logits into NaN, whatever the new rows look like (an F16 save overflows to Inf
    on rows past 65,504). Allowed, they are left out of every vocabulary figure, and the
    reports count them."""
    if not len(nonfinite) or allow_nonfinite:
        return
    raise InputError(
        ckpt.store.file_of(matrix.tensor),
        f"{len(nonfinite)} original rows of '{matrix.tensor}' hold NaN/Inf (ids "
        f"{nonfinite[:5].tolist()}{', ...' if len(nonfinite) > 5 else ''}): a prompt holding "
        "those tokens gives NaN logits; restore them from the base model, or pass "
        "--allow-nonfinite to leave them out and measure the rest",
    )
