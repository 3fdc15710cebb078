"""``geodiag.measure`` and ``geodiag.check``: the CLI's measurements, from Python.

One entry for every kind of source, each returning the objects the CLI renders:

- a checkpoint folder or weights file (``str`` / ``Path``): the reading path of
  ``geodiag metrics``; ``new_ids`` / ``levels`` / ``codebooks`` override what it finds;
- a (vocab, dim) numpy array or torch tensor, e.g. ``model.get_input_embeddings().weight``;
- a transformers (or PEFT) model: its input embedding and, when untied, its output head
  as a second matrix; PEFT wrappers give their effective rows (see :mod:`geodiag.io.formats.memory`).

Nothing is written to disk. torch is imported only when the source is a torch object.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.analysis.options import GATE_MEASURE, NO_NEIGHBOURS, AnalyzeOptions
from geodiag.analysis.reports import CheckpointReport
from geodiag.errors import InputError
from geodiag.gate.checks import (
    THRESHOLDS,
    GateConfig,
    GateResult,
    load_config,
    with_overrides,
)
from geodiag.gate.verdict import judge
from geodiag.io.checkpoint import Checkpoint, open_checkpoint
from geodiag.io.formats.memory import MemoryStore, array_matrix, gathered, is_torch, model_matrices
from geodiag.io.sources.options import ReadOptions
from geodiag.io.vocabulary import sidecar as sidecar_mod
from geodiag.io.vocabulary.new_tokens import Levels, NewTokens, Sources, declare, resolve_new_tokens
from geodiag.io.vocabulary.sid_index import read_foreign
from geodiag.io.vocabulary.tokenizer import tokenizer_in_memory
from geodiag.settings import default_of

Codebooks = Mapping[str, object] | str | os.PathLike[str]


def _codebooks(
    codebooks: Codebooks, new: NewTokens, side: sidecar_mod.SemanticIds | None = None
) -> tuple[dict[str, np.ndarray], str | None]:
    """Per level, the codebook vector of each new token's code, in token order: from a
    file or {level: array or tensor}, checked by the one rule the file readers apply
    (``codebook_rows``; the levels' sizes: ``side``'s, else their tokens' given in Python)."""
    from geodiag.io.vocabulary.codebooks import books_in_file, codebook_rows, level_sizes

    if isinstance(codebooks, str | os.PathLike):
        where = str(codebooks)
        given = books_in_file(Path(codebooks), new.level_names)[0]
    else:
        where = "codebooks"
        given = {
            str(k): b.detach().cpu().numpy() if is_torch(b) else b for k, b in codebooks.items()
        }
    books = {k: np.asarray(b, dtype=np.float64) for k, b in given.items()}
    return codebook_rows(books, new, where, where, sizes=level_sizes(new, side))


class _Names:
    """Token names for rows in memory: a transformers tokenizer's, else the levels'."""

    def __init__(self, names: dict[int, str], tokenizer=None) -> None:
        self.names, self.tokenizer = names, tokenizer

    @property
    def added(self) -> list:
        """The tokenizer's added tokens, as a folder's TokenizerInfo holds them (the
        integrity notes read which special ones the new-token rule left out)."""
        if self.tokenizer is None or not hasattr(self.tokenizer, "added_tokens_decoder"):
            return []
        return tokenizer_in_memory(self.tokenizer).added

    def token(self, token_id: int) -> str | None:
        if self.tokenizer is not None:
            name = self.tokenizer.convert_ids_to_tokens(int(token_id))
            if isinstance(name, str):
                return name
        return self.names.get(int(token_id))


def _memory_checkpoint(source, tokenizer=None, probe_ids=None) -> Checkpoint:
    if hasattr(source, "get_input_embeddings"):
        matrices, tied = model_matrices(source, probe_ids)
        description = f"model {type(source).__name__}"
    else:
        matrices, tied = [array_matrix("embedding", source)], True
        description = "torch tensor" if is_torch(source) else "numpy array"
    from geodiag.io.checkpoint import Matrix

    store = MemoryStore(matrices, f"in-memory {description}")
    roles = ("input", "output")
    return Checkpoint(
        path=Path(f"<{description}>"),
        store=store,
        config={},
        tokenizer=None if tokenizer is None else _Names({}, tokenizer),  # type: ignore[arg-type]
        sidecar=None,
        new=NewTokens(np.zeros(0, np.int64), [], "argument", 0),
        matrices=[
            Matrix(r, m.name, m.dtype, m.shape[0], m.shape[1])
            for r, m in zip(roles, matrices, strict=False)
        ],
        tied=tied,
        codebooks={},
        codebooks_path=None,
        codebooks_note=None,
    )


def open_source(
    source,
    *,
    new_ids=None,
    base_vocab_size: int | None = None,
    levels: Levels | None = None,
    codebooks: Codebooks | None = None,
    read: ReadOptions | None = None,
    tokenizer=None,
    reference=None,
    sids=None,
) -> Checkpoint:
    """A :class:`Checkpoint` over a path, an array, a tensor or a model, with overrides;
    ``reference`` (any such source, read with the same overrides) is set as its reference.
    ``sids``: a framework's SID map (``--sids``; :func:`with_sids`)."""
    levels, codebooks, read = with_sids(source, sids, levels, codebooks, read, tokenizer)
    ckpt = _open_source(source, new_ids, base_vocab_size, levels, codebooks, read, tokenizer)
    if reference is not None:
        from geodiag.io.vocabulary.references import same_vocab

        ref = _open_source(reference, new_ids, base_vocab_size, levels, codebooks, read, tokenizer)
        same_vocab(ref, ckpt, "reference", "reference")
        ckpt.use_reference(ref, "reference=")
    return ckpt


def with_sids(source, sids, levels, codebooks, read, tokenizer):
    """(levels, codebooks, read) once ``sids``, a framework's SID map, is taken in: for a
    path, ``--sids`` and ``--codebooks``; in memory, its levels matched to ``tokenizer``
    (a transformers tokenizer, or a folder holding ``tokenizer.json``)."""
    if sids is None:
        return levels, codebooks, read
    if levels is not None:
        raise InputError("sids", "give either sids or levels")
    if isinstance(source, str | os.PathLike):
        extra = {"codebooks": Path(codebooks)} if isinstance(codebooks, str | os.PathLike) else {}
        read = dataclasses.replace(read or ReadOptions(), sids=Path(sids), **extra)
        return None, None if extra else codebooks, read
    if tokenizer is None:
        raise InputError("sids", "in memory, a tokenizer names the SID tokens: pass tokenizer=")
    path_books = codebooks if isinstance(codebooks, str | os.PathLike) else None
    found = read_foreign(sids, path_books, tokenizer)
    return found.sids, (found.codebooks or codebooks) or None, read


def _open_source(source, new_ids, base_vocab_size, levels, codebooks, read, tokenizer):
    """The rows are new as :mod:`geodiag.io.vocabulary.new_tokens` resolves them: ``new_ids`` /
    ``levels`` first, for a file as for rows in memory; then (files only) its flags and files."""
    declared = declare(new_ids, levels, base_vocab_size)
    if isinstance(source, str | os.PathLike):
        ckpt = open_checkpoint(source, read or ReadOptions(), declared)
        if declared is None:
            if base_vocab_size is not None:
                raise InputError("base_vocab_size", "give it with new_ids or levels")
            if codebooks is not None and ckpt.new.level_names:
                ckpt.codebooks, ckpt.codebooks_note = _codebooks(codebooks, ckpt.new, ckpt.sidecar)
            return ckpt
    else:
        if read is not None:
            raise InputError("read", "ReadOptions apply to files; give new_ids / levels instead")
        found = None  # the tokenizer's added tokens, when it says which rows are new
        if declared is None and tokenizer is not None:
            found = tokenizer_in_memory(tokenizer)
            if not found.added_non_special():
                raise InputError(
                    "tokenizer",
                    f"{found.path.name} has no added non-special tokens, so it does not say "
                    "which rows are new: pass new_ids=[...] (or levels={name: ids})",
                )
        elif declared is None:
            raise InputError(
                "new_ids",
                "which rows are new? pass tokenizer= (its added tokens are the new rows, as "
                "the CLI reads them from a folder), new_ids=[...] or levels={name: ids}",
            )
        probe = declared.ids if declared is not None else [t.id for t in found.added_non_special()]
        ckpt = _memory_checkpoint(source, tokenizer, probe_ids=np.sort(probe))
        sources = Sources(
            root=ckpt.path,
            opts=ReadOptions(),
            n_rows=ckpt.matrices[0].n_rows,
            tokenizer=found or ckpt.tokenizer,  # the CLI's rule: geodiag.io.vocabulary.new_tokens
            sidecar=None,
            sidecar_path=None,
            declared=declared,
        )
        ckpt.new = resolve_new_tokens(sources)
    if declared is None:  # found by the tokenizer: levels from the names, no codebooks
        ckpt.sidecar, ckpt.codebooks, ckpt.codebooks_path = None, {}, None
        ckpt.codebooks_note = (
            "no codebooks given: RSA skipped"
            if ckpt.new.level_names
            else "levels unknown (no levels given): RSA skipped"
        )
        return ckpt
    if ckpt.tokenizer is None and declared.by_level is not None:
        # No tokenizer: the new rows are named as their levels name them, like a sidecar.
        names = dict(zip(ckpt.new.ids.tolist(), ckpt.new.tokens, strict=True))
        ckpt.tokenizer = _Names(names)  # type: ignore[assignment]
    ckpt.sidecar = None
    ckpt.codebooks, ckpt.codebooks_path, ckpt.codebooks_note = {}, None, None
    if not ckpt.new.level_names:
        ckpt.codebooks_note = "levels unknown (no levels given): RSA skipped"
        return ckpt
    side_path = declared.levels_path
    if codebooks is None and side_path is not None:
        beside = side_path.parent / sidecar_mod.CODEBOOKS_FILENAME
        codebooks = beside if beside.is_file() else None
    if codebooks is None:
        ckpt.codebooks_note = "no codebooks given: RSA skipped"
    else:
        ckpt.codebooks, ckpt.codebooks_note = _codebooks(codebooks, ckpt.new)
    return ckpt


def measure(
    source,
    *,
    new_ids=None,
    base_vocab_size: int | None = None,
    levels: Levels | None = None,
    codebooks: Codebooks | None = None,
    read: ReadOptions | None = None,
    tokenizer=None,
    reference=None,
    data=(),
    chat_template=None,
    options: AnalyzeOptions | None = None,
    seed: int = default_of(AnalyzeOptions, "seed"),
    n_permutations: int = default_of(AnalyzeOptions, "n_permutations"),
    neighbors: int = default_of(AnalyzeOptions, "neighbors_k"),
    sids=None,
) -> CheckpointReport:
    """Every metric of ``geodiag metrics`` for the new rows of ``source``.

    source: a checkpoint path, a (vocab, dim) numpy array / torch tensor, or a
    transformers / PEFT model. new_ids: the new rows (any order; required in memory).
    levels: ``{name: token ids in code order}`` or a ``semantic_ids.json`` (its
    ``codebooks.safetensors`` is used when ``codebooks`` is not given). codebooks:
    ``{name: (codes, code_dim) array}`` or a ``.safetensors`` file. base_vocab_size:
    original rows are ``[0, N)`` (default: the levels' sidecar's, else the smallest new id;
    :mod:`geodiag.io.vocabulary.new_tokens` resolves the rows, for a path as in memory). tokenizer: a
    transformers tokenizer for rows in memory: it names them (neighbour tables) and, without
    new_ids / levels, says which are new (its added non-special tokens, as the CLI reads a
    folder's tokenizer). reference: an earlier state
    of the same rows (a path, an array, a tensor or a model, e.g. the init checkpoint): rows
    that barely moved since it count as untrained (``--reference``). ``options`` wins over
    ``seed`` / ``n_permutations`` / ``neighbors``. data: training or evaluation files whose
    use of each new token is counted (``--data``), chat_template: a template file
    (``--chat-template``); both for a checkpoint path, over ``read``'s. sids: a framework's
    SID map (``--sids``: LC-Rec/MiniOneRec ``*.index.json``, ETEGRec ``*.code.json``, GRID's
    tensor, a ``.npy``, OpenOneRec or semantic-ids-llm parquet), with ``codebooks`` as that
    framework writes them; in memory its tokens are named by ``tokenizer``. Raises
    :class:`InputError` on bad input.
    """
    if data or chat_template is not None:
        if not isinstance(source, str | os.PathLike):
            raise InputError("data", "usage is counted for a checkpoint path (its tokenizer.json)")
        read = dataclasses.replace(
            read or ReadOptions(),
            data=tuple(Path(p) for p in ([data] if isinstance(data, str | os.PathLike) else data)),
            chat_template=None if chat_template is None else Path(chat_template),
        )
    opts = options
    if opts is None:  # the keywords' defaults are AnalyzeOptions' (geodiag.settings.default_of)
        opts = AnalyzeOptions(seed=seed, n_permutations=n_permutations, neighbors_k=neighbors)
        if not neighbors:
            opts = dataclasses.replace(opts, **NO_NEIGHBOURS)
    with gathered(source) if hasattr(source, "get_input_embeddings") else _nothing():
        ckpt = open_source(
            source,
            new_ids=new_ids,
            base_vocab_size=base_vocab_size,
            levels=levels,
            codebooks=codebooks,
            read=read,
            tokenizer=tokenizer,
            reference=reference,
            sids=sids,
        )
        return measure_checkpoint(ckpt, opts)


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def check(
    source,
    *,
    config: GateConfig | str | os.PathLike[str] | None = None,
    **kwargs,
) -> GateResult:
    """The CI gate (``geodiag check``) on ``source``; ``result.passed`` says pass / fail,
    ``result.verdict`` the diagnosis in one sentence (as the terminal prints it), and
    ``result.cause`` / ``result.remedy`` the cause and the remedy it names (None: none).

    Thresholds: ``config`` (a :class:`GateConfig`, or a TOML file as for ``--config``;
    default: the documented defaults, ``./pyproject.toml`` is not read), then one keyword
    per :class:`GateConfig` field (``min_spread_ratio=0.1``; None: not given). Other
    keywords go to :func:`measure`, which takes only what the checks read, as ``geodiag
    check`` does (:data:`geodiag.analysis.options.GATE_MEASURE`: no neighbour scan, no
    uncentered or reference spectra; ``neighbors`` is ignored).
    """
    if config is None:
        cfg = GateConfig()
    elif isinstance(config, GateConfig):
        cfg = config
    else:
        cfg = dataclasses.replace(GateConfig(), **load_config(Path(config)))
    cfg = with_overrides(cfg, {k: kwargs.pop(k) for k in THRESHOLDS if k in kwargs})
    given = {k: kwargs.pop(k) for k in ("seed", "n_permutations") if k in kwargs}
    opts = kwargs.pop("options", None) or AnalyzeOptions(**given)  # its defaults otherwise
    kwargs.pop("neighbors", None)
    return judge(measure(source, options=dataclasses.replace(opts, **GATE_MEASURE), **kwargs), cfg)


def _with_threshold_keywords(fn):
    """``fn``'s signature shows one keyword per threshold (help(), IDEs, inspect)."""
    sig = inspect.signature(fn)
    *head, rest = sig.parameters.values()
    kind = inspect.Parameter.KEYWORD_ONLY
    thresholds = [
        inspect.Parameter(k, kind, default=None, annotation="float | None") for k in THRESHOLDS
    ]
    fn.__signature__ = sig.replace(parameters=[*head, *thresholds, rest])
    return fn


check = _with_threshold_keywords(check)
