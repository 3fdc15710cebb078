"""A checkpoint: its rows' store and everything known of its new rows, without
instantiating the model.

:func:`open_checkpoint` opens the files (:func:`open_files`: a PEFT adapter folder over its
base (``geodiag.io.formats.peft_adapter``), else a safetensors file, a sharded set, a torch
state dict or a GGUF file (``geodiag.io.formats.store``), on disk or by URL; the folders
beside them, the adapter's first), then builds the :class:`Checkpoint` through the one
assembly every route takes, rows in memory included (:mod:`geodiag.io.assembly`: config
and tokenizer, matrices, SID maps, new tokens, codebooks, notes), and last resolves the
reference the movement is measured from: ``--reference``, else a before the files carry
(``geodiag.io.vocabulary.references``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.assembly import Draft, Matrix, Opened, assemble
from geodiag.io.formats.peft_adapter import AdapterInfo, is_adapter, open_adapter
from geodiag.io.formats.registry import open_base as open_adapter_base
from geodiag.io.formats.registry import open_remote, open_store
from geodiag.io.formats.tensor_names import Head
from geodiag.io.formats.tensor_store import TensorStore
from geodiag.io.sources.layouts import FSDP_SUBFOLDERS, dcp_folder, resolve_hub_cache, zero_folder
from geodiag.io.sources.options import ReadOptions
from geodiag.io.sources.remote import is_remote
from geodiag.io.stack import detect_stack
from geodiag.io.vocabulary import sidecar as sidecar_mod
from geodiag.io.vocabulary.new_tokens import Declared, NewTokens
from geodiag.io.vocabulary.references import (
    OFF_HINT,
    Found,
    candidates,
    declined,
    same_vocab,
)
from geodiag.io.vocabulary.tokenizer import TokenizerInfo, load_tokenizer_in

# Unused padding rows read at most (their integrity finding, the padding comparison of the
# new rows): past this many, they are counted and no row is read.
MAX_PADDING_ROWS = 100_000


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
    # gti's semantic_ids.json when a framework's SID map (``sidecar``) names the levels and
    # items instead: its provenance (init strategy, init checkpoint) still applies.
    own_sidecar: sidecar_mod.SemanticIds | None = None
    _codebook_digest: str | None = None

    @property
    def provenance(self) -> dict:
        """What wrote the new rows, as gti's sidecar (else the SID map) says it."""
        side = self.own_sidecar or self.sidecar
        return dict(side.provenance) if side is not None else {}

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
    """Open a checkpoint folder, weights file, PEFT adapter folder or URL and resolve
    everything but the row values: its files opened (:func:`open_files`), the rest by the
    one assembly every route takes (:mod:`geodiag.io.assembly`), then its reference.
    ``declared``: new tokens named in Python (the API), over every flag and file."""
    opts = opts or ReadOptions()
    ckpt = checkpoint_of(assemble(open_files(path, opts), opts, declared))
    return with_reference(ckpt, opts, declared)


def checkpoint_of(d: Draft) -> Checkpoint:
    """The :class:`Checkpoint` an assembly made (:func:`geodiag.io.assembly.assemble`),
    without its reference (:func:`with_reference`)."""
    o = d.opened
    side = d.own_sidecar or d.sidecar
    adapter = o.adapter.provenance() if o.adapter is not None else None
    return Checkpoint(
        path=o.path,
        store=o.store,
        config=d.config,
        # Rows in memory are named by the tokenizer object unless the folder's file is used.
        tokenizer=d.tokenizer if o.names is None or d.tokenizer is not o.tokenizer else o.names,
        sidecar=None if d.declared is not None else d.sidecar,
        new=d.new,
        matrices=d.matrices,
        tied=d.tied,
        codebooks=d.codebooks,
        codebooks_path=d.codebooks_path,
        codebooks_note=d.codebooks_note,
        notes=d.notes,
        adapter=adapter or {},
        stack=detect_stack(o.roots, d.config, side.provenance if side else None, adapter),
        base=o.base,
        head_left_out=d.head_left_out,
        head=d.head,
        read=d.opts,
        roots=o.roots,
        location=o.location,
        remote=o.remote,
        own_sidecar=d.own_sidecar,
        _codebook_digest=d.codebook_digest,
    )


def with_reference(
    ckpt: Checkpoint,
    opts: ReadOptions,
    declared: Declared | None,
    opener: Callable[..., Checkpoint] | None = None,
) -> Checkpoint:
    """``ckpt`` with the before its rows' movement is measured from, and the notes on it:
    the first of :func:`geodiag.io.vocabulary.references.candidates` that opens, with the same
    options and new tokens. ``--reference`` that fails is the user's error; an automatic
    one that is missing, unreadable or mismatched is a note, and the next is tried.
    ``opener``: how a candidate is opened (default :func:`open_checkpoint`; a report hands
    the checkpoints it already opened)."""
    notes = [] if opts.reference is not None or opts.auto_reference else declined(ckpt)
    for c in candidates(ckpt, opts):
        if isinstance(c, Found) and c.reference is None:
            notes.append(c.note)
            continue
        if isinstance(c, Found):
            ckpt.reference, ckpt.reference_notes = c.reference, [*notes, f"{c.note} ({OFF_HINT})"]
            return ckpt
        given = c.what == "--reference"
        try:
            ref = _open_reference(ckpt, c.path, opts, declared, c.what, opener)
        except InputError as e:
            if given:
                raise
            notes.append(f"{c.what} {c.path} not used as the reference: {e.problem}")
            continue
        note = c.note(ref) if given else f"{c.note(ref)} ({OFF_HINT})"
        ckpt.reference, ckpt.reference_notes = ref, [*notes, note]
        return ckpt
    ckpt.reference, ckpt.reference_notes = None, notes
    return ckpt


def _open_reference(ckpt: Checkpoint, path, opts, declared, what: str, opener) -> Checkpoint:
    """``path`` (a URL: a str) opened as ``ckpt`` was, without a reference of its own, and
    checked to hold the same new tokens."""
    if not is_remote(path) and not Path(path).exists():
        raise InputError(what, f"{path}: no such file or folder")
    alone = dataclasses.replace(opts, reference=None, auto_reference=False)
    ref = (opener or open_checkpoint)(path, alone, declared)
    same_vocab(ref, ckpt, path, what)
    return ref


def open_files(path: str | Path, opts: ReadOptions) -> Opened:
    """The weights at ``path`` (a URL's by byte ranges), the folders beside them, and the
    base ``--base`` names."""
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
    return Opened(
        path=path,
        store=store,
        roots=roots,
        location=location or str(path),
        adapter=adapter,
        # Rows read over the network: a URL's, or an adapter's over a base given by URL.
        remote=location is not None or (adapter is not None and is_remote(adapter.base_path)),
        notes=[hub_note] if hub_note else [],
        base=base_ckpt,
    )


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
