"""``geodiag.measure`` and ``geodiag.check``: the CLI's measurements, from Python.

One entry for every kind of source, each returning the objects the CLI renders:

- a checkpoint folder or weights file (``str`` / ``Path``): the reading path of
  ``geodiag metrics``; ``new_ids`` / ``levels`` / ``codebooks`` override what it finds;
- a (vocab, dim) numpy array or torch tensor, e.g. ``model.get_input_embeddings().weight``;
- a transformers (or PEFT) model: its input embedding and, when untied, its output head
  as a second matrix; PEFT wrappers give their effective rows (see :mod:`geodiag.io.memory`).

Nothing is written to disk. torch is imported only when the source is a torch object.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from geodiag.analysis.checkpoint import analyze_checkpoint
from geodiag.analysis.options import AnalyzeOptions
from geodiag.analysis.reports import CheckpointReport
from geodiag.errors import InputError
from geodiag.gate.checks import (
    THRESHOLDS,
    GateConfig,
    GateResult,
    load_config,
    run_gate,
    with_overrides,
)
from geodiag.io import sidecar as sidecar_mod
from geodiag.io.checkpoint import Checkpoint, open_checkpoint
from geodiag.io.levels import Levels
from geodiag.io.levels import read_levels as _levels  # the names _new_tokens calls them by
from geodiag.io.levels import token_ids as _ids
from geodiag.io.memory import MemoryStore, array_matrix, gathered, is_torch, model_matrices
from geodiag.io.new_tokens import NewTokens
from geodiag.io.options import ReadOptions
from geodiag.settings import default_of

Codebooks = Mapping[str, object] | str | os.PathLike[str]


def _codebooks(codebooks: Codebooks, new: NewTokens) -> tuple[dict[str, np.ndarray], str | None]:
    """Per level, the codebook vector of each new token's code, in token order."""
    if isinstance(codebooks, str | os.PathLike):
        from geodiag.io.safetensors import SafetensorsFile

        f = SafetensorsFile(Path(codebooks))
        where = str(codebooks)
        books = {name: f.read(name) for name in new.level_names if name in f.tensors}
    else:
        where = "codebooks"
        books = {}
        for name, book in codebooks.items():
            books[str(name)] = book.detach().cpu().numpy() if is_torch(book) else np.asarray(book)
    out, missing = {}, []
    assert new.level_index is not None and new.codes is not None
    for li, name in enumerate(new.level_names):
        if name not in books:
            missing.append(name)
            continue
        book = np.asarray(books[name], dtype=np.float64)
        n_codes = int((new.level_index == li).sum())
        if book.ndim != 2 or book.shape[0] != n_codes:
            raise InputError(
                where,
                f"codebook '{name}' has shape {list(book.shape)}; level '{name}' has {n_codes} "
                "codes, so expected [codes, code_dim]",
            )
        if not np.isfinite(book).all():
            raise InputError(where, f"codebook '{name}' holds NaN or Inf values")
        out[name] = book[new.codes[new.level_index == li]]
    note = f"no codebook for level(s) {', '.join(missing)} in {where}" if missing else None
    return out, note


def _new_tokens(
    ckpt: Checkpoint, new_ids, base_vocab_size: int | None, levels: Levels | None
) -> tuple[NewTokens, Path | None]:
    n_rows = ckpt.matrices[0].n_rows
    side_path = None
    if levels is not None:
        by_level, side_path = _levels(levels)
        ids = np.concatenate(list(by_level.values()))
        if new_ids is not None and set(_ids(new_ids, "new_ids").tolist()) != set(ids.tolist()):
            raise InputError("new_ids", "differ from the token ids of `levels`; give one of them")
        names = list(by_level)
        level_index = np.concatenate([np.full(len(v), i) for i, v in enumerate(by_level.values())])
        codes = np.concatenate([np.arange(len(v)) for v in by_level.values()])
        tokens = [
            sidecar_mod.token_string(n, c) for n, v in by_level.items() for c in range(len(v))
        ]
    else:
        ids = _ids(new_ids, "new_ids")
        names, level_index, codes, tokens = [], None, None, None
    if len(np.unique(ids)) != len(ids):
        raise InputError("levels", "a token id appears in two levels")
    bad = ids[(ids < 0) | (ids >= n_rows)]
    if bad.size:
        raise InputError(
            "new_ids", f"token ids {bad[:5].tolist()} out of range for {n_rows} embedding rows"
        )
    base = int(ids.min()) if base_vocab_size is None else int(base_vocab_size)
    if base < 1 or base > int(ids.min()):
        raise InputError(
            "base_vocab_size",
            f"{base}: the original rows [0, base) must be non-empty and below every new id",
        )
    if ckpt.tokenizer is not None or tokens is None:
        tokens = [ckpt.token(int(i)) for i in ids]
    else:  # in memory with levels: the new rows are named like a sidecar names them
        ckpt.tokenizer = _Names(dict(zip(ids.tolist(), tokens, strict=True)))
    source = "sidecar" if side_path is not None else "argument"
    new = NewTokens(
        ids,
        tokens,
        source,
        base,
        names,
        level_index,
        codes,
        "sidecar" if side_path else ("argument" if names else None),
    )
    return new, side_path


class _Names:
    """Token names for rows in memory: a transformers tokenizer's, else the levels'."""

    def __init__(self, names: dict[int, str], tokenizer=None) -> None:
        self.names, self.tokenizer = names, tokenizer

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
) -> Checkpoint:
    """A :class:`Checkpoint` over a path, an array, a tensor or a model, with overrides;
    ``reference`` (any such source, read with the same overrides) is set as its reference."""
    ckpt = _open_source(source, new_ids, base_vocab_size, levels, codebooks, read, tokenizer)
    if reference is not None:
        from geodiag.io.checkpoint import same_vocab

        ref = _open_source(reference, new_ids, base_vocab_size, levels, codebooks, read, tokenizer)
        same_vocab(ref, ckpt, "reference", "reference")
        ckpt.reference = ref
    return ckpt


def _open_source(source, new_ids, base_vocab_size, levels, codebooks, read, tokenizer):
    from_file = isinstance(source, str | os.PathLike)
    explicit = new_ids is not None or levels is not None
    given = None
    if explicit:  # the ids the caller names, from new_ids or else from the levels
        given = (
            _ids(new_ids, "new_ids")
            if new_ids is not None
            else np.concatenate(list(_levels(levels)[0].values()))  # type: ignore[arg-type]
        )
    if from_file:
        read = read or ReadOptions()
        if given is not None and read.new_tokens is None and read.base_vocab_size is None:
            # The ids are given: do not make the reader guess (and fail) first.
            read = dataclasses.replace(read, base_vocab_size=max(int(given.min()), 1))
        ckpt = open_checkpoint(source, read)
        if not explicit:
            if base_vocab_size is not None:
                raise InputError("base_vocab_size", "give it with new_ids or levels")
            if codebooks is not None and ckpt.new.level_names:
                ckpt.codebooks, ckpt.codebooks_note = _codebooks(codebooks, ckpt.new)
            return ckpt
    else:
        if read is not None:
            raise InputError("read", "ReadOptions apply to files; give new_ids / levels instead")
        if given is None:
            raise InputError(
                "new_ids", "which rows are new? pass new_ids=[...] (or levels={name: ids})"
            )
        ckpt = _memory_checkpoint(source, tokenizer, probe_ids=np.sort(given))
    ckpt.new, side_path = _new_tokens(ckpt, new_ids, base_vocab_size, levels)
    ckpt.sidecar = None
    ckpt.codebooks, ckpt.codebooks_path, ckpt.codebooks_note = {}, None, None
    if not ckpt.new.level_names:
        ckpt.codebooks_note = "levels unknown (no levels given): RSA skipped"
        return ckpt
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
    options: AnalyzeOptions | None = None,
    seed: int = default_of(AnalyzeOptions, "seed"),
    n_permutations: int = default_of(AnalyzeOptions, "n_permutations"),
    neighbors: int = default_of(AnalyzeOptions, "neighbors_k"),
) -> CheckpointReport:
    """Every metric of ``geodiag metrics`` for the new rows of ``source``.

    source: a checkpoint path, a (vocab, dim) numpy array / torch tensor, or a
    transformers / PEFT model. new_ids: the new rows (any order; required in memory).
    levels: ``{name: token ids in code order}`` or a ``semantic_ids.json`` (its
    ``codebooks.safetensors`` is used when ``codebooks`` is not given). codebooks:
    ``{name: (codes, code_dim) array}`` or a ``.safetensors`` file. base_vocab_size:
    original rows are ``[0, N)`` (default: the smallest new id). tokenizer: a transformers
    tokenizer that names the rows in memory (neighbour tables). reference: an earlier state
    of the same rows (a path, an array, a tensor or a model, e.g. the init checkpoint): rows
    that barely moved since it count as untrained (``--reference``). ``options`` wins over
    ``seed`` / ``n_permutations`` / ``neighbors``. Raises :class:`InputError` on bad input.
    """
    opts = options
    if opts is None:  # the keywords' defaults are AnalyzeOptions' (geodiag.settings.default_of)
        opts = AnalyzeOptions(seed=seed, n_permutations=n_permutations, neighbors_k=neighbors)
        if not neighbors:
            opts = dataclasses.replace(opts, neighbors_max=0)
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
        )
        return analyze_checkpoint(ckpt, opts)


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def check(
    source,
    *,
    config: GateConfig | str | os.PathLike[str] | None = None,
    **kwargs,
) -> GateResult:
    """The CI gate (``geodiag check``) on ``source``; ``result.passed`` says pass / fail.

    Thresholds: ``config`` (a :class:`GateConfig`, or a TOML file as for ``--config``;
    default: the documented defaults, ``./pyproject.toml`` is not read), then one keyword
    per :class:`GateConfig` field (``min_spread_ratio=0.1``; None: not given). Other
    keywords go to :func:`measure` (the neighbour scan is off, as in ``geodiag check``).
    """
    if config is None:
        cfg = GateConfig()
    elif isinstance(config, GateConfig):
        cfg = config
    else:
        cfg = dataclasses.replace(GateConfig(), **load_config(Path(config)))
    cfg = with_overrides(cfg, {k: kwargs.pop(k) for k in THRESHOLDS if k in kwargs})
    kwargs.setdefault("neighbors", 0)
    return run_gate(measure(source, **kwargs), cfg)


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
