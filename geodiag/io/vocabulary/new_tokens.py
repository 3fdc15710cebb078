"""Which rows of the embedding are the new tokens, and their levels.

One resolver per source, tried in this order; the first that answers wins
(:data:`RESOLVERS`), whatever the input: a checkpoint on disk
(:func:`geodiag.io.checkpoint.open_checkpoint`), or an array, a tensor or a model (the
Python API, the Trainer callback):

0. arguments: ``new_ids`` / ``levels`` / ``base_vocab_size`` given in Python
   (:func:`declare`), over every flag and file;
1. flags: ``--new-tokens START:END``, else ``--base-vocab-size N`` (an explicit flag
   overrides every file);
2. the ``semantic_ids.json`` sidecar's token ids, with their levels and codes; over a
   PEFT adapter only when it names the adapter's trainable tokens (``--all-rows-new``
   then sets the base vocabulary to nothing);
3. ``--all-rows-new``: every row of the tensor;
4. a PEFT adapter's trainable-token indices;
5. ``--base``: the added tokens absent from the base's tokenizer, special or not;
6. the tokenizer's added non-special tokens.

When none answers the input is bad, and the error says what was looked for. The
arguments keep the ids in their order (their levels when given, none otherwise); every
other source but the sidecar takes its levels from token names matching ``--level-pattern``
(when all of them match), and orders the rows by (level, code).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.memory import is_torch
from geodiag.io.sources.options import ReadOptions
from geodiag.io.vocabulary import sidecar as sidecar_mod
from geodiag.io.vocabulary.tokenizer import AddedToken, TokenizerInfo, list_names


@dataclass
class NewTokens:
    ids: np.ndarray  # (n,) int64, in (level, code) order when levels are known
    tokens: list[str]
    # "argument" | "sidecar" | "flag" | "tokenizer" | "adapter" | "base" | "all rows"
    source: str
    base_vocab_size: int  # original rows are [0, base_vocab_size)
    level_names: list[str] = field(default_factory=list)
    level_index: np.ndarray | None = None  # (n,) index into level_names
    codes: np.ndarray | None = None  # (n,) code within the level
    levels_source: str | None = None  # "sidecar" | "token names" | None


# The levels a caller names: {level name: token ids in code order}, or a sidecar (a
# semantic_ids.json, its folder, or a loaded one).
Levels = Mapping[str, Sequence[int]] | str | os.PathLike[str] | sidecar_mod.SemanticIds


def _token_ids(x, what: str) -> np.ndarray:
    """(n,) int64 ids from a sequence, an array or a torch tensor; ``what``: the argument
    named in errors."""
    if is_torch(x):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.ndim != 1 or a.size == 0 or not np.issubdtype(a.dtype, np.integer):
        raise InputError(what, f"expected a non-empty 1-D sequence of token ids, got {a!r:.80}")
    if len(np.unique(a)) != len(a):
        raise InputError(what, "token ids repeat")
    return a.astype(np.int64)


def _read_levels(levels: Levels) -> tuple[dict[str, np.ndarray], Path | None, int | None]:
    """{level name: token ids in code order}, the sidecar file they came from, and the
    base vocabulary size a sidecar states."""
    if isinstance(levels, str | os.PathLike):
        path = Path(levels)
        path = path / sidecar_mod.FILENAME if path.is_dir() else path
        side = sidecar_mod.load(path)
        if not side.has_token_ids:
            raise InputError(path, "has no token ids yet (written before vocabulary extension)")
        return _read_levels(side)[0], path, side.base_vocab_size
    if isinstance(levels, sidecar_mod.SemanticIds):
        # A framework's vocabulary may hold only the codes its items use (id -1 for the
        # rest): the rows are those with a token; the map itself says their codes
        # (Declared.sids, which geodiag.io.assembly resolves as the map in use).
        by_level = {
            lv.name: np.asarray([t for t in lv.token_ids if t >= 0], np.int64)
            for lv in levels.levels
        }
        return by_level, None, levels.base_vocab_size
    if not isinstance(levels, Mapping) or not levels:
        raise InputError("levels", "expected {level name: token ids in code order} or a sidecar")
    return {str(k): _token_ids(v, f"levels['{k}']") for k, v in levels.items()}, None, None


def _level_layout(sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(level index, code) of each new token, the tokens in (level, code) order."""
    level_index = np.concatenate([np.full(k, i) for i, k in enumerate(sizes)])
    return level_index, np.concatenate([np.arange(k) for k in sizes])


def default_base(stated: int | None, ids: np.ndarray) -> int:
    """The base vocabulary size: as stated (an argument, a sidecar), else the smallest new
    id (every row below the new ones is original)."""
    return int(ids.min()) if stated is None else int(stated)


@dataclass(frozen=True)
class Declared:
    """The new tokens a caller names in Python, parsed and checked against each other
    (:func:`declare`); :func:`from_arguments` resolves them against the rows."""

    ids: np.ndarray  # (n,) int64: the levels' ids in (level, code) order, else new_ids as given
    by_level: dict[str, np.ndarray] | None  # {level: ids in code order}, when levels are given
    levels_path: Path | None  # the semantic_ids.json the levels were read from
    base_vocab_size: int | None  # as given, else as the levels' sidecar states it
    where: str  # the argument that named the ids, for errors
    # The SID map the levels were given as (a sidecar file or object, a framework's map read
    # by read_foreign): its items say which codes are used (geodiag.io.assembly).
    sids: sidecar_mod.SemanticIds | None = None

    @property
    def base(self) -> int:
        """Original rows are ``[0, base)`` (:func:`default_base`)."""
        return default_base(self.base_vocab_size, self.ids)


def declare(
    new_ids=None, levels: Levels | None = None, base_vocab_size: int | None = None
) -> Declared | None:
    """``new_ids`` (any order) and / or ``levels``, as the API and the callback take them;
    None when neither is given. Raises :class:`InputError` when they disagree."""
    if new_ids is None and levels is None:
        return None
    given = None if new_ids is None else _token_ids(new_ids, "new_ids")
    if levels is None:
        assert given is not None
        return Declared(given, None, None, base_vocab_size, "new_ids")
    by_level, path, stated = _read_levels(levels)
    sids = levels if isinstance(levels, sidecar_mod.SemanticIds) else None
    if path is not None:
        sids = sidecar_mod.load(path)
    lacking = [] if sids is None else [t for lv in sids.levels for t in lv.token_ids if t < 0]
    if lacking and base_vocab_size not in (None, stated):
        raise InputError(
            "base_vocab_size",
            f"the levels given leave {len(lacking)} codes without a token, so their rows are "
            "placed by the map itself, over the base it states: leave base_vocab_size out",
        )
    ids = np.concatenate(list(by_level.values()))
    if given is not None and set(given.tolist()) != set(ids.tolist()):
        raise InputError("new_ids", "differ from the token ids of `levels`; give one of them")
    if len(np.unique(ids)) != len(ids):
        raise InputError("levels", "a token id appears in two levels")
    where = "new_ids" if given is not None else str(path or "levels")
    base = base_vocab_size if base_vocab_size is not None else stated
    return Declared(ids, by_level, path, base, where, sids)


@dataclass(frozen=True)
class Sources:
    """What the resolvers look at: the options and what was found beside the weights."""

    root: Path  # the checkpoint, named in errors
    opts: ReadOptions
    n_rows: int  # rows of the input embedding
    tokenizer: TokenizerInfo | None
    sidecar: sidecar_mod.SemanticIds | None
    sidecar_path: Path | None
    trainable: np.ndarray | None = None  # (k,) a PEFT adapter's trainable-token indices
    base_tokenizer: TokenizerInfo | None = None  # --base's (or an adapter's base's)
    declared: Declared | None = None  # the new tokens named in Python (the API, the callback)

    def name_of(self, token_id: int) -> str:
        t = self.tokenizer.token(token_id) if self.tokenizer is not None else None
        return t if t is not None else f"<id {token_id}>"


Resolver = Callable[[Sources], "NewTokens | None"]


def _check_id_range(
    ids: np.ndarray,
    n_rows: int,
    where: Path | str,
    what: str | None,
    tok: TokenizerInfo | None = None,
) -> None:
    """Raise unless every id has a row; ``tok``: the tokenizer the ids come from, whose
    size past the rows means the embedding was never resized for its added tokens."""
    bad = ids[(ids < 0) | (ids >= n_rows)]
    if not bad.size:
        return
    if tok is not None and len(tok) > n_rows:
        raise InputError(
            where,
            f"the tokenizer has {len(tok)} tokens but the embedding has {n_rows} rows: "
            f"{int((ids >= n_rows).sum())} added tokens (ids {bad[:5].tolist()}"
            f"{', ...' if bad.size > 5 else ''}) have no row; the embedding was not resized "
            "after adding them: call model.resize_token_embeddings(len(tokenizer)) before "
            "training and saving",
        )
    raise InputError(
        where,
        f"{what + ': ' if what else ''}token ids {bad[:5].tolist()} out of range for an "
        f"embedding of {n_rows} rows",
    )


def _parse_level_names(
    tokens: list[str], pattern: str
) -> tuple[list[str], np.ndarray, np.ndarray] | None:
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise InputError("--level-pattern", f"invalid regex ({e})") from None
    if not {"level", "code"} <= set(rx.groupindex):
        raise InputError("--level-pattern", "needs named groups (?P<level>...) and (?P<code>...)")
    matches = [rx.match(t) for t in tokens]
    if not tokens or not all(matches):
        return None
    names: list[str] = []
    index, codes = np.empty(len(tokens), np.int64), np.empty(len(tokens), np.int64)
    for i, m in enumerate(matches):
        if m["level"] not in names:
            names.append(m["level"])
        index[i] = names.index(m["level"])
        codes[i] = int(m["code"])
    return names, index, codes


def _rows(src: Sources, ids: np.ndarray, source: str, base: int) -> NewTokens:
    """New rows ``ids`` named from the tokenizer, with levels from their names when they
    all match ``--level-pattern``."""
    tokens = [src.name_of(int(i)) for i in ids]
    new = NewTokens(ids, tokens, source, base)
    parsed = _parse_level_names(tokens, src.opts.level_pattern)
    if parsed is not None:
        names, index, codes = parsed
        order = np.lexsort((codes, index))  # (level, code) order, as the cosine map expects
        new.ids, new.tokens = ids[order], [tokens[i] for i in order]
        new.level_names, new.level_index, new.codes = names, index[order], codes[order]
        new.levels_source = "token names"
    return new


def from_arguments(src: Sources) -> NewTokens | None:
    """``new_ids`` / ``levels`` given in Python: rows named from the tokenizer, else (with
    levels) as a sidecar names them."""
    d = src.declared
    if d is None:
        return None
    _check_id_range(d.ids, src.n_rows, d.where, None)
    base = d.base
    if base < 1 or base > int(d.ids.min()):
        raise InputError(
            "base_vocab_size",
            f"{base}: the original rows [0, base) must be non-empty and below every new id",
        )
    if d.by_level is None:
        return NewTokens(d.ids, [src.name_of(int(i)) for i in d.ids], "argument", base)
    sizes = [len(v) for v in d.by_level.values()]
    if src.tokenizer is not None:
        tokens = [src.name_of(int(i)) for i in d.ids]
    else:
        tokens = [
            sidecar_mod.token_string(n, c)
            for n, k in zip(d.by_level, sizes, strict=True)
            for c in range(k)
        ]
    level_index, codes = _level_layout(sizes)
    source = "sidecar" if d.levels_path is not None else "argument"
    return NewTokens(d.ids, tokens, source, base, list(d.by_level), level_index, codes, source)


def from_flags(src: Sources) -> NewTokens | None:
    """``--new-tokens START:END`` or ``--base-vocab-size N``."""
    opts, n_rows, tok = src.opts, src.n_rows, src.tokenizer
    if opts.new_tokens is not None:
        start, end = opts.new_tokens
        if not 0 <= start < end:
            raise InputError(
                "--new-tokens", f"expected START:END with 0 <= START < END, got {start}:{end}"
            )
        if end > n_rows:
            raise InputError("--new-tokens", f"END {end} is past the embedding's {n_rows} rows")
        return _rows(src, np.arange(start, end, dtype=np.int64), "flag", start)
    if opts.base_vocab_size is not None:
        base = opts.base_vocab_size
        end = min(n_rows, len(tok)) if tok is not None and len(tok) > base else n_rows
        if not 0 < base < end:
            raise InputError(
                "--base-vocab-size", f"{base} leaves no new rows in an embedding of {n_rows} rows"
            )
        return _rows(src, np.arange(base, end, dtype=np.int64), "flag", base)
    return None


def from_sidecar(src: Sources) -> NewTokens | None:
    """The sidecar's token ids, levels and codes, checked against the tokenizer."""
    side, side_path, tok = src.sidecar, src.sidecar_path, src.tokenizer
    if side is None or not side.has_token_ids:
        return None
    if src.trainable is not None and {
        t for lv in side.levels for t in lv.token_ids if t >= 0
    } != set(src.trainable.tolist()):
        return None  # the adapter trained other rows than the sidecar names
    assert side_path is not None
    # (level, code, id) of each code with a token (another framework's vocabulary may hold
    # only the codes its items use: the rest, id -1, have no row to measure)
    layout = [
        (li, code, t) for li, lv in enumerate(side.levels) for code, t in enumerate(lv.token_ids)
    ]
    layout = [x for x in layout if x[2] >= 0]
    ids = np.array([t for _, _, t in layout], dtype=np.int64)
    _check_id_range(ids, src.n_rows, side_path, "sidecar disagrees with the tensors")
    tokens = []
    for li, code, t in layout:
        expected = side.levels[li].token(code)
        actual = tok.token(t) if tok is not None else None
        if actual is not None and tok is not None and tok.added and actual != expected:
            raise InputError(
                side_path,
                f"sidecar disagrees with tokenizer.json: id {t} is '{actual}', "
                f"sidecar says '{expected}'",
            )
        tokens.append(actual if actual is not None else expected)
    level_index = np.array([li for li, _, _ in layout], dtype=np.int64)
    codes = np.array([code for _, code, _ in layout], dtype=np.int64)
    base = default_base(side.base_vocab_size, ids)
    if src.opts.all_rows_new:
        base = 0
    if base > int(ids.min()):
        raise InputError(
            side_path, f"base_vocab_size {base} overlaps the new token ids (min {ids.min()})"
        )
    names = [lv.name for lv in side.levels]
    return NewTokens(ids, tokens, "sidecar", base, names, level_index, codes, "sidecar")


def from_all_rows(src: Sources) -> NewTokens | None:
    """``--all-rows-new``: every row of the tensor."""
    if not src.opts.all_rows_new:
        return None
    return _rows(src, np.arange(src.n_rows, dtype=np.int64), "all rows", 0)


def from_adapter(src: Sources) -> NewTokens | None:
    """A PEFT adapter's trainable tokens, in index order, repeats dropped."""
    if src.trainable is None:
        return None
    ids = np.array(list(dict.fromkeys(src.trainable.tolist())), dtype=np.int64)
    return _rows(src, ids, "adapter", int(ids.min()))


def from_base(src: Sources) -> NewTokens | None:
    """``--base``: the added tokens the base's tokenizer does not know."""
    tok, base_tok = src.tokenizer, src.base_tokenizer
    if base_tok is None:
        return None
    added = absent_from(tok, base_tok) if tok is not None else []
    if not added:
        raise InputError(
            "--base",
            f"every token of {tok.path if tok else src.root / 'tokenizer.json'} is in the "
            f"base's tokenizer ({base_tok.path}): no new tokens to measure; if the new "
            "tokens reuse ids the base already has (renamed reserved tokens), name their rows "
            "with --new-tokens START:END",
        )
    ids = np.array([t.id for t in added], dtype=np.int64)
    _check_id_range(ids, src.n_rows, tok.path, "added tokens disagree with the tensors", tok)
    return _rows(src, ids, "base", int(ids.min()))


def from_tokenizer(src: Sources) -> NewTokens | None:
    """The tokenizer's added non-special tokens."""
    tok = src.tokenizer
    if tok is None or not tok.added_non_special():
        return None
    ids = np.array([t.id for t in tok.added_non_special()], dtype=np.int64)
    _check_id_range(ids, src.n_rows, tok.path, "added tokens disagree with the tensors", tok)
    return _rows(src, ids, "tokenizer", int(ids.min()))


RESOLVERS: tuple[Resolver, ...] = (
    from_arguments,
    from_flags,
    from_sidecar,
    from_all_rows,
    from_adapter,
    from_base,
    from_tokenizer,
)


def resolve_new_tokens(src: Sources) -> NewTokens:
    """The first answer of :data:`RESOLVERS`, in the module docstring's order."""
    opts = src.opts
    if opts.all_rows_new and (opts.new_tokens is not None or opts.base_vocab_size is not None):
        raise InputError(
            "--all-rows-new", "give either --all-rows-new or --new-tokens/--base-vocab-size"
        )
    for resolve in RESOLVERS:
        if (new := resolve(src)) is not None:
            return new
    tok = src.tokenizer
    special = [t for t in tok.added if t.special] if tok is not None else []
    has = (
        f"{tok.path.name}'s {len(special)} added tokens are all special "
        f"({list_names([t.content for t in special[:4]], len(special))}), "
        "and special tokens are measured only when --base says they are new"
        if special
        else f"no added tokens in {tok.path.name}"
        if tok is not None
        else "no tokenizer.json (nor tokenizer.model with added_tokens.json)"
    )
    raise InputError(
        src.root,
        f"cannot tell which rows are new: no semantic_ids.json with token ids; {has}; pass "
        "--base BASE (the tokens absent from its tokenizer), --new-tokens START:END or "
        "--base-vocab-size N",
    )


def absent_from(tok: TokenizerInfo, base: TokenizerInfo) -> list[AddedToken]:
    """The added tokens of ``tok`` (special or not) that ``base`` does not know, by id."""
    known = {t.content for t in base.added} | set(base.vocab.values())
    return sorted((t for t in tok.added if t.content not in known), key=lambda t: t.id)
