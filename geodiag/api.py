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
from geodiag.io.assembly import assemble
from geodiag.io.checkpoint import Checkpoint, checkpoint_of, open_checkpoint, with_reference
from geodiag.io.formats.memory import gathered, is_torch
from geodiag.io.in_memory import TokenNames, open_in_memory
from geodiag.io.sources.options import ReadOptions
from geodiag.io.vocabulary import sidecar as sidecar_mod
from geodiag.io.vocabulary.new_tokens import Levels, NewTokens, declare
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
    folder=None,
) -> Checkpoint:
    """A :class:`Checkpoint` over a path, an array, a tensor or a model, with overrides;
    ``reference`` (any such source, read with the same overrides) is set as its reference.
    ``sids``: a framework's SID map (``--sids``; :func:`with_sids`). ``folder``: for rows in
    memory, the folder whose files describe them (default: the one the model or tokenizer
    was loaded from; False: none; :mod:`geodiag.io.in_memory`)."""
    levels, codebooks, read = with_sids(source, sids, levels, codebooks, read, tokenizer, folder)
    opened = (new_ids, base_vocab_size, levels, codebooks, read, tokenizer)
    ckpt = _open_source(source, *opened, folder)
    if reference is not None:
        from geodiag.io.vocabulary.references import same_vocab

        ref = _open_source(reference, *opened, None)
        same_vocab(ref, ckpt, "reference", "reference")
        ckpt.use_reference(ref, "reference=")
    return ckpt


def with_sids(source, sids, levels, codebooks, read, tokenizer, folder=None):
    """(levels, codebooks, read) once ``sids``, a framework's SID map, is taken in: for a
    path, ``--sids`` and ``--codebooks``; in memory, its levels matched to ``tokenizer``
    (a transformers tokenizer, or a folder holding ``tokenizer.json``), else to the
    tokenizer of ``folder``. The map's items go with its levels (Declared.sids)."""
    if sids is None:
        return levels, codebooks, read
    if levels is not None:
        raise InputError("sids", "give either sids or levels")
    if isinstance(source, str | os.PathLike):
        extra = {"codebooks": Path(codebooks)} if isinstance(codebooks, str | os.PathLike) else {}
        read = dataclasses.replace(read or ReadOptions(), sids=Path(sids), **extra)
        return None, None if extra else codebooks, read
    if tokenizer is None and not isinstance(folder, str | os.PathLike):
        raise InputError(
            "sids", "in memory, a tokenizer names the SID tokens: pass tokenizer= (or folder=)"
        )
    path_books = codebooks if isinstance(codebooks, str | os.PathLike) else None
    found = read_foreign(sids, path_books, tokenizer if tokenizer is not None else folder)
    return found.sids, (found.codebooks or codebooks) or None, read


def _open_source(source, new_ids, base_vocab_size, levels, codebooks, read, tokenizer, folder):
    """The rows are new as :mod:`geodiag.io.vocabulary.new_tokens` resolves them: ``new_ids``
    / ``levels`` first, then the flags and files, for a path as for rows in memory (whose
    files are those of the folder they were loaded from: :mod:`geodiag.io.in_memory`). Both
    go through the one assembly (:mod:`geodiag.io.assembly`)."""
    declared = declare(new_ids, levels, base_vocab_size)
    if declared is None and base_vocab_size is not None:
        raise InputError("base_vocab_size", "give it with new_ids or levels")
    if isinstance(source, str | os.PathLike):
        if folder is not None:
            raise InputError("folder", "applies to rows in memory; a path is its own folder")
        ckpt = open_checkpoint(source, read or ReadOptions(), declared)
    else:
        if read is not None and read != ReadOptions():
            raise InputError("read", "ReadOptions apply to files; give new_ids / levels instead")
        probe = declared.ids if declared is not None else None
        if probe is None and tokenizer is not None:
            probe = [t.id for t in tokenizer_in_memory(tokenizer).added_non_special()]
        opened = open_in_memory(
            source, tokenizer, folder, None if probe is None else np.sort(probe)
        )
        if declared is None and not opened.roots:
            _say_which_rows(tokenizer)
        opts = ReadOptions()
        ckpt = with_reference(checkpoint_of(assemble(opened, opts, declared)), opts, declared)
        if ckpt.tokenizer is None and ckpt.new.level_names:
            # No tokenizer: the new rows are named as their levels name them, like a sidecar.
            names = dict(zip(ckpt.new.ids.tolist(), ckpt.new.tokens, strict=True))
            ckpt.tokenizer = TokenNames(names)  # type: ignore[assignment]
    if codebooks is not None and ckpt.new.level_names:
        ckpt.codebooks, ckpt.codebooks_note = _codebooks(codebooks, ckpt.new, ckpt.sidecar)
        ckpt.codebooks_path = Path(codebooks) if isinstance(codebooks, str | os.PathLike) else None
    elif not ckpt.new.level_names and not ckpt.codebooks_note:
        ckpt.codebooks_note = "levels unknown (no levels given): RSA skipped"
    elif not ckpt.codebooks and not ckpt.codebooks_note:
        ckpt.codebooks_note = "no codebooks given: RSA skipped"
    return ckpt


def _say_which_rows(tokenizer) -> None:
    """Rows in memory with no folder to describe them: the tokenizer must say which are new."""
    if tokenizer is None:
        raise InputError(
            "new_ids",
            "which rows are new? pass tokenizer= (its added tokens are the new rows, as "
            "the CLI reads them from a folder), new_ids=[...], levels={name: ids} or "
            "folder= (the checkpoint folder whose files describe the rows)",
        )
    found = tokenizer_in_memory(tokenizer)
    if not found.added_non_special():
        raise InputError(
            "tokenizer",
            f"{found.path.name} has no added non-special tokens, so it does not say "
            "which rows are new: pass new_ids=[...] (or levels={name: ids})",
        )


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
    folder=None,
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
    framework writes them; in memory its tokens are named by ``tokenizer``. folder: for rows
    in memory, the folder whose files (sidecar, SID map, codebooks, the init checkpoint)
    describe them, as a path's own files do (default: the folder the tokenizer or the model
    was loaded from, when it describes them; False: none; :mod:`geodiag.io.in_memory`), so a
    model in memory is judged as its saved folder is. Raises :class:`InputError` on bad
    input.
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
            folder=folder,
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
