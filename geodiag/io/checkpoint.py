"""Open a checkpoint and find its new-token rows, without instantiating the model.

Resolution order (DESIGN.md, checkpoint contract):
- tensors: ``--tensor`` override, else the known embedding names of common
  architectures, else the unique ``*embed_tokens/wte/word_embeddings`` tensor;
  the output head is analyzed on its own when it is not tied;
- new rows: ``--new-tokens START:END`` / ``--base-vocab-size N`` when given (an
  explicit flag overrides), else the ``semantic_ids.json`` sidecar, else the
  tokenizer's added non-special tokens;
- levels: the sidecar, else token names matching ``--level-pattern``, else none;
- codebooks: ``--codebooks FILE``, else ``codebooks.safetensors`` beside the weights.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from geodiag import sidecar as sidecar_mod
from geodiag.errors import InputError, cannot_read, nested_too_deeply
from geodiag.io.safetensors import SafetensorsFile
from geodiag.io.stack import detect_stack
from geodiag.io.store import FLOAT_DTYPES, TensorStore, is_float, open_store
from geodiag.io.tokenizer import AddedToken, TokenizerInfo, load_tokenizer
from geodiag.settings import setting

DEFAULT_LEVEL_PATTERN = r"^<(?P<level>[A-Za-z]+)_(?P<code>\d+)>$"

# Exact names first (most common architectures), then suffixes for wrapped models.
INPUT_EMBEDDING_NAMES = (
    "model.embed_tokens.weight",  # Llama, Qwen, Mistral, SmolLM, Gemma
    "transformer.wte.weight",  # GPT-2, GPT-J
    "embeddings.word_embeddings.weight",  # BERT-like
    "bert.embeddings.word_embeddings.weight",
    "gpt_neox.embed_in.weight",  # Pythia
    "model.decoder.embed_tokens.weight",  # OPT
    "transformer.word_embeddings.weight",  # BLOOM
    "shared.weight",  # T5 (encoder./decoder.embed_tokens.weight, when stored, are copies)
    "model.shared.weight",  # BART, mBART, Pegasus
    "embed_tokens.weight",
    "wte.weight",
)
INPUT_EMBEDDING_SUFFIXES = (
    "embed_tokens.weight",
    ".wte.weight",
    "word_embeddings.weight",
    "embed_in.weight",
)
OUTPUT_HEAD_NAMES = ("lm_head.weight", "embed_out.weight", "model.lm_head.weight")


@dataclass(frozen=True)
class ReadOptions:
    """How to find the new rows; every field is a CLI flag of the same name (the one
    definition of the reading options of every command: ``geodiag.settings``)."""

    tensor: str | None = setting(
        None, help="Embedding tensor name (default: detected).", flags=("--tensor",)
    )
    sidecar: Path | None = setting(
        None, help="semantic_ids.json (default: beside the weights).", flags=("--sidecar",)
    )
    new_tokens: tuple[int, int] | None = setting(  # [start, end)
        None,
        help="New rows as START:END (END exclusive).",
        flags=("--new-tokens",),
        cli_type=str | None,
        parse=lambda text: parse_range(text),
    )
    base_vocab_size: int | None = setting(
        None, help="Rows >= N are new.", flags=("--base-vocab-size",)
    )
    level_pattern: str = setting(
        DEFAULT_LEVEL_PATTERN,
        help="Regex with (?P<level>) and (?P<code>) groups.",
        flags=("--level-pattern",),
    )
    codebooks: Path | None = setting(
        None,
        help="RQ-VAE codebooks (.safetensors, one tensor per level).",
        flags=("--codebooks",),
    )
    allow_nonfinite: bool = setting(
        False, help="Drop NaN/Inf rows instead of failing.", flags=("--allow-nonfinite",)
    )
    base: Path | None = setting(
        None,
        help="The base checkpoint folder: the new tokens are those absent from its "
        "tokenizer (special or not); for a PEFT adapter, the model it is read over "
        "(default: its base_model_name_or_path, when a local folder).",
        flags=("--base",),
    )
    all_rows_new: bool = setting(
        False,
        help="Every row of the tensor is a new token (a separate table, e.g. TIGER's codes).",
        flags=("--all-rows-new",),
    )


def parse_range(text: str | None) -> tuple[int, int] | None:
    """``START:END`` -> (start, end), as ``--new-tokens`` takes it."""
    if text is None:
        return None
    try:
        start, end = (int(x) for x in text.split(":"))
    except ValueError:
        raise InputError("--new-tokens", f"expected START:END (integers), got {text!r}") from None
    return start, end


@dataclass
class Matrix:
    """One embedding matrix to analyze: the input embedding, or an untied output head."""

    role: str  # "input" | "output"
    tensor: str
    dtype: str
    n_rows: int
    dim: int


@dataclass
class NewTokens:
    ids: np.ndarray  # (n,) int64, in (level, code) order when levels are known
    tokens: list[str]
    source: str  # "sidecar" | "flag" | "tokenizer" | "adapter" | "all rows"
    base_vocab_size: int  # original rows are [0, base_vocab_size)
    level_names: list[str] = field(default_factory=list)
    level_index: np.ndarray | None = None  # (n,) index into level_names
    codes: np.ndarray | None = None  # (n,) code within the level
    levels_source: str | None = None  # "sidecar" | "token names" | None


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
    root = base if base.is_dir() else base.parent
    tok_path = root / "tokenizer.json"
    if not base.exists():
        raise InputError("--base", f"{base}: no such file or folder")
    if not tok_path.is_file():
        raise InputError(
            "--base",
            f"{base}: no tokenizer.json, so the tokens added since cannot be told apart "
            "(pass the base's save_pretrained folder, or --new-tokens START:END)",
        )
    try:
        store = open_store(base)
    except InputError:
        store = None  # a tokenizer-only folder still says which tokens are new
    return BaseCheckpoint(base, load_tokenizer(tok_path), store)


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
    _codebook_digest: str | None = None

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

    @property
    def has_vocabulary(self) -> bool:
        """False when every row is new (--all-rows-new): nothing to compare with."""
        return self.new.base_vocab_size > 0

    def token(self, token_id: int) -> str:
        t = self.tokenizer.token(int(token_id)) if self.tokenizer is not None else None
        return t if t is not None else f"<id {int(token_id)}>"

    def read_rows(self, matrix: Matrix, ids: np.ndarray) -> np.ndarray:
        return self.store.read_rows(matrix.tensor, ids)

    def iter_original(
        self, matrix: Matrix, chunk: int = 1024, float32: bool = True
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Original rows ``[0, base_vocab_size)`` in blocks: memory stays at two blocks.

        Blocks come as float32 when that is exact (F32, F16, BF16 weights): half the bytes
        of float64 and no conversion. The next block is read (and hashed for the digest,
        which releases the GIL) in a helper thread while the caller scores this one.
        Block size: 1024 rows (2.4 MB at SmolLM2's width in float32); 2048 raised the
        run's peak by 5 MB and 4096 by 17 MB, at no measurable gain in time.
        """
        from concurrent.futures import ThreadPoolExecutor

        n = self.new.base_vocab_size
        starts = list(range(0, n, chunk))

        def read(start: int) -> tuple[np.ndarray, np.ndarray]:
            stop = min(start + chunk, n)
            rows = self.store.read_block(matrix.tensor, start, stop, float32=float32)
            return np.arange(start, stop, dtype=np.int64), rows

        if not starts:
            return
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(read, starts[0])
            for nxt in [*starts[1:], None]:
                block = pending.result()
                if nxt is not None:
                    pending = pool.submit(read, nxt)
                yield block

    def digests(self) -> dict[str, str]:
        d = self.store.digests()
        if self.codebooks_path is not None and self._codebook_digest:
            d[str(self.codebooks_path)] = self._codebook_digest
        return d


def read_json_object(path: Path) -> dict:
    """A JSON object file (a config); anything else is bad input naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(path, f"not valid JSON ({e.__class__.__name__})") from None
    except RecursionError:
        raise nested_too_deeply(path) from None
    except OSError as e:
        raise cannot_read(path, e) from None
    if not isinstance(data, dict):
        raise InputError(path, "expected a JSON object")
    return data


def _find_input_tensor(store: TensorStore, where: Path, override: str | None) -> str:
    names = store.names()
    if override is not None:
        if override not in names:
            raise InputError(
                where, f"--tensor '{override}' not found (tensors: {', '.join(names[:8])}...)"
            )
        return override
    for name in INPUT_EMBEDDING_NAMES:
        if name in names:
            return name
    hits = [n for n in names if n.endswith(INPUT_EMBEDDING_SUFFIXES)]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise InputError(where, f"several candidate embeddings {hits}; pick one with --tensor NAME")
    two_d = [n for n in names if len(store.shape(n)) == 2][:6]
    raise InputError(
        where,
        f"no recognizable input embedding among {len(names)} tensors (known names: "
        f"{', '.join(INPUT_EMBEDDING_NAMES)}; or one name ending in "
        f"{', '.join(INPUT_EMBEDDING_SUFFIXES)}); pass --tensor NAME "
        f"(2-D tensors include: {', '.join(two_d) or 'none'})",
    )


def _find_output_head(
    store: TensorStore, input_name: str, config: dict, untied_by_adapter: bool = False
) -> tuple[str | None, bool]:
    """(untied head tensor or None, tied?). Tied when config says so or no head is stored.

    ``untied_by_adapter``: a PEFT adapter saved its own copy of the head
    (``modules_to_save``), which untied it from the embedding in the merged model.
    """
    names = set(store.names())
    head = next((n for n in OUTPUT_HEAD_NAMES if n in names), None)
    tie = config.get("tie_word_embeddings")
    if config.get("scale_decoder_outputs") is False:
        # T5 v1.1 as transformers 5 saves it: the config always says tied, this field keeps
        # the original tie_word_embeddings=false, and reloading unties a stored head.
        tie = False
    if head is None or head == input_name:
        return None, True
    if tie is True and not untied_by_adapter:
        return None, True  # a stored copy of the tied matrix: same rows, analyze once
    return head, False


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


def _check_id_range(ids: np.ndarray, n_rows: int, where: Path | str, what: str) -> None:
    bad = ids[(ids < 0) | (ids >= n_rows)]
    if bad.size:
        raise InputError(
            where,
            f"{what}: token ids {bad[:5].tolist()} out of range for an embedding of {n_rows} rows",
        )


def _new_tokens(
    root: Path,
    opts: ReadOptions,
    n_rows: int,
    tok: TokenizerInfo | None,
    side: sidecar_mod.SemanticIds | None,
    side_path: Path | None,
    trainable: np.ndarray | None = None,
    base_tok: TokenizerInfo | None = None,
) -> NewTokens:
    """Which rows are new: flags, else the sidecar, else an adapter's trainable tokens, else
    the added tokens absent from ``base_tok`` (``--base``, special or not), else the
    tokenizer's added non-special tokens. ``trainable``: a PEFT adapter's trainable-token
    indices; a sidecar naming the same rows still gives their levels."""

    def name_of(i: int) -> str:
        t = tok.token(i) if tok is not None else None
        return t if t is not None else f"<id {i}>"

    explicit = opts.new_tokens is not None or opts.base_vocab_size is not None
    if opts.all_rows_new and explicit:
        raise InputError(
            "--all-rows-new", "give either --all-rows-new or --new-tokens/--base-vocab-size"
        )
    side_ids = (
        {t for lv in side.levels for t in lv.token_ids}
        if side is not None and side.has_token_ids
        else None
    )
    use_side = side_ids is not None and not explicit
    if use_side and trainable is not None and side_ids != set(trainable.tolist()):
        use_side = False  # the adapter trained other rows than the sidecar names
    if use_side:
        assert side is not None
        assert side_path is not None
        ids = np.array([t for lv in side.levels for t in lv.token_ids], dtype=np.int64)
        _check_id_range(ids, n_rows, side_path, "sidecar disagrees with the tensors")
        tokens = []
        for lv in side.levels:
            for code, t in enumerate(lv.token_ids):
                expected = sidecar_mod.token_string(lv.name, code)
                actual = tok.token(t) if tok is not None else None
                if actual is not None and tok is not None and tok.added and actual != expected:
                    raise InputError(
                        side_path,
                        f"sidecar disagrees with tokenizer.json: id {t} is '{actual}', "
                        f"sidecar says '{expected}'",
                    )
                tokens.append(actual if actual is not None else expected)
        level_index = np.concatenate([np.full(lv.size, i) for i, lv in enumerate(side.levels)])
        codes = np.concatenate([np.arange(lv.size) for lv in side.levels])
        base = side.base_vocab_size if side.base_vocab_size is not None else int(ids.min())
        if opts.all_rows_new:
            base = 0
        if base > int(ids.min()):
            raise InputError(
                side_path, f"base_vocab_size {base} overlaps the new token ids (min {ids.min()})"
            )
        return NewTokens(
            ids,
            tokens,
            "sidecar",
            base,
            [lv.name for lv in side.levels],
            level_index,
            codes,
            "sidecar",
        )

    if opts.all_rows_new:
        ids, source, base = np.arange(n_rows, dtype=np.int64), "all rows", 0
    elif opts.new_tokens is not None:
        start, end = opts.new_tokens
        if not 0 <= start < end:
            raise InputError(
                "--new-tokens", f"expected START:END with 0 <= START < END, got {start}:{end}"
            )
        if end > n_rows:
            raise InputError("--new-tokens", f"END {end} is past the embedding's {n_rows} rows")
        ids, source, base = np.arange(start, end, dtype=np.int64), "flag", start
    elif opts.base_vocab_size is not None:
        base = opts.base_vocab_size
        end = min(n_rows, len(tok)) if tok is not None and len(tok) > base else n_rows
        if not 0 < base < end:
            raise InputError(
                "--base-vocab-size", f"{base} leaves no new rows in an embedding of {n_rows} rows"
            )
        ids, source = np.arange(base, end, dtype=np.int64), "flag"
    elif trainable is not None:
        ids = np.array(list(dict.fromkeys(trainable.tolist())), dtype=np.int64)
        source, base = "adapter", int(ids.min())
    elif base_tok is not None:
        added = absent_from(tok, base_tok) if tok is not None else []
        if not added:
            raise InputError(
                "--base",
                f"every token of {tok.path if tok else root / 'tokenizer.json'} is in the "
                f"base's tokenizer ({base_tok.path}): no new tokens to measure",
            )
        ids = np.array([t.id for t in added], dtype=np.int64)
        _check_id_range(ids, n_rows, tok.path, "added tokens disagree with the tensors")
        source, base = "base", int(ids.min())
    elif tok is not None and tok.added_non_special():
        added = tok.added_non_special()
        ids = np.array([t.id for t in added], dtype=np.int64)
        _check_id_range(ids, n_rows, tok.path, "added tokens disagree with the tensors")
        source, base = "tokenizer", int(ids.min())
    else:
        special = [t for t in tok.added if t.special] if tok is not None else []
        has = (
            f"tokenizer.json's {len(special)} added tokens are all special "
            f"({', '.join(t.content for t in special[:4])}{', ...' if len(special) > 4 else ''}), "
            "and special tokens are measured only when --base says they are new"
            if special
            else "no added tokens in tokenizer.json"
        )
        raise InputError(
            root,
            f"cannot tell which rows are new: no semantic_ids.json with token ids; {has}; pass "
            "--base BASE (the tokens absent from its tokenizer), --new-tokens START:END or "
            "--base-vocab-size N",
        )
    tokens = [name_of(int(i)) for i in ids]
    new = NewTokens(ids, tokens, source, base)
    parsed = _parse_level_names(tokens, opts.level_pattern)
    if parsed is not None:
        names, index, codes = parsed
        order = np.lexsort((codes, index))  # (level, code) order, as the cosine map expects
        new.ids, new.tokens = ids[order], [tokens[i] for i in order]
        new.level_names, new.level_index, new.codes = names, index[order], codes[order]
        new.levels_source = "token names"
    return new


def absent_from(tok: TokenizerInfo, base: TokenizerInfo) -> list[AddedToken]:
    """The added tokens of ``tok`` (special or not) that ``base`` does not know, by id."""
    known = {t.content for t in base.added} | set(base.vocab.values())
    return sorted((t for t in tok.added if t.content not in known), key=lambda t: t.id)


def special_note(tok: TokenizerInfo | None, new: NewTokens) -> str | None:
    """Name the added special tokens left out of the measurement, if any: those at or past
    the first new id (specials below it, ``<|endoftext|>`` at 0, are the base's own)."""
    if tok is None or new.source != "tokenizer":
        return None
    special = [t for t in tok.added if t.special and t.id >= new.base_vocab_size]
    if not special:
        return None
    names = ", ".join(t.content for t in special[:4]) + (", ..." if len(special) > 4 else "")
    return (
        f"{len(special)} added special token(s) not measured ({names}): special tokens "
        "cannot be told from the base's own without --base BASE, which measures every token "
        "absent from the base, special or not"
    )


def _load_codebooks(path: Path, new: NewTokens) -> tuple[dict[str, np.ndarray], str | None, str]:
    """Per level, the codebook vector of each new token's code, in token order.

    With a sidecar the level sizes are known and a codebook must have exactly that
    many codes; with levels parsed from token names it must cover every code seen.
    """
    f = SafetensorsFile(path)
    books: dict[str, np.ndarray] = {}
    missing = []
    assert new.level_index is not None and new.codes is not None
    for li, name in enumerate(new.level_names):
        if name not in f.tensors:
            missing.append(name)
            continue
        book = f.read(name)
        codes = new.codes[new.level_index == li]
        if book.ndim != 2:
            raise InputError(
                path, f"codebook '{name}' has shape {list(book.shape)}, expected [codes, code_dim]"
            )
        if new.levels_source == "sidecar" and book.shape[0] != len(codes):
            raise InputError(
                path,
                f"codebook '{name}' has {book.shape[0]} codes, but level '{name}' has {len(codes)}",
            )
        if codes.max() >= book.shape[0]:
            raise InputError(
                path,
                f"codebook '{name}' has {book.shape[0]} codes, but token <{name}_{codes.max()}> exists",
            )
        if not np.isfinite(book).all():
            raise InputError(path, f"codebook '{name}' holds NaN or Inf values")
        books[name] = book[codes]
    note = f"no codebook for level(s) {', '.join(missing)} in {path.name}" if missing else None
    return books, note, f.digest.hexdigest()


def open_checkpoint(path: str | Path, opts: ReadOptions | None = None) -> Checkpoint:
    """Open a checkpoint folder or weights file and resolve everything but the row values."""
    from geodiag.io.peft_adapter import is_adapter, open_adapter  # imports this module's names

    opts = opts or ReadOptions()
    path = Path(path)
    adapter = None
    if is_adapter(path):
        adapter, store = open_adapter(path, opts.base)
        # Files beside the weights: the adapter folder's own first, else the base's.
        roots = [
            path,
            adapter.base_path if adapter.base_path.is_dir() else adapter.base_path.parent,
        ]
    else:
        store = open_store(path)
        roots = [path if path.is_dir() else path.parent]
    base_ckpt = open_base(Path(opts.base)) if adapter is None and opts.base is not None else None

    def beside(name: str) -> Path:
        return next((r / name for r in roots if (r / name).is_file()), roots[0] / name)

    config = read_json_object(beside("config.json")) if beside("config.json").is_file() else {}
    tok_path = beside("tokenizer.json")
    tok = load_tokenizer(tok_path) if tok_path.is_file() else None

    input_name = _find_input_tensor(store, path, opts.tensor)
    untied_by_adapter = adapter is not None and any(
        p.full_kind == "modules_to_save" and n in OUTPUT_HEAD_NAMES
        for n, p in adapter.patches.items()
    )
    head_name, tied = _find_output_head(store, input_name, config, untied_by_adapter)
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
        if not is_float(dtype):
            raise InputError(
                where, f"tensor '{name}' has dtype {dtype}; expected {', '.join(FLOAT_DTYPES)}"
            )
        hidden = config.get("hidden_size", config.get("n_embd"))
        if isinstance(hidden, int) and shape[1] != hidden:
            raise InputError(
                where, f"tensor '{name}' is {list(shape)} but config.json says hidden_size {hidden}"
            )
        matrices.append(Matrix(role, name, dtype, shape[0], shape[1]))
    head_notes = []
    if adapter is not None and len(matrices) == 2 and matrices[1].n_rows < matrices[0].n_rows:
        # The base was resized in memory before PEFT wrapped it; PEFT saved the resized
        # embedding but not the untied head, whose new rows exist nowhere on disk.
        head_notes.append(
            f"output head '{head_name}' not analyzed: the base stores {matrices[1].n_rows} rows, "
            f"the adapter saves none of its {matrices[0].n_rows - matrices[1].n_rows} new rows "
            "(resize the base and save it, or add lm_head to modules_to_save)"
        )
        matrices.pop()
    if len(matrices) == 2 and matrices[1].n_rows != matrices[0].n_rows:
        raise InputError(
            store.file_of(head_name or ""),
            f"output head has {matrices[1].n_rows} rows but the input embedding has {matrices[0].n_rows}",
        )

    side_path = opts.sidecar or beside(sidecar_mod.FILENAME)
    side = sidecar_mod.load(side_path) if (opts.sidecar or side_path.is_file()) else None
    n_rows = matrices[0].n_rows
    patch = adapter.patches.get(input_name) if adapter is not None else None
    trainable = patch.token_indices if patch is not None else None
    base_tok = base_ckpt.tokenizer if base_ckpt is not None else None
    if adapter is not None and tok is not None and tok.path.parent == path:
        # The adapter saved a tokenizer of its own: tokens its base lacks are the new ones
        # (when there are none, the base was resized before PEFT: read as before).
        base_tok_path = roots[1] / "tokenizer.json"
        if base_tok_path.is_file():
            base_tok = load_tokenizer(base_tok_path)
            base_tok = base_tok if absent_from(tok, base_tok) else None
    new = _new_tokens(
        path, opts, n_rows, tok, side, side_path if side else None, trainable, base_tok
    )

    notes = [*(adapter.notes if adapter is not None else []), *head_notes]
    if (note := special_note(tok, new)) is not None:
        notes.append(note)
    if new.source == "base":
        notes.append(f"new rows: the {len(new.ids)} tokens absent from the base's tokenizer")
    if untied_by_adapter and config.get("tie_word_embeddings"):
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
    books: dict[str, np.ndarray] = {}
    book_path = opts.codebooks or beside(sidecar_mod.CODEBOOKS_FILENAME)
    book_note, book_digest = None, None
    if not new.level_names:
        book_note = (
            "levels unknown (no sidecar, token names do not match --level-pattern): RSA skipped"
        )
    elif opts.codebooks is None and not book_path.is_file():
        book_note = (
            "no codebooks.safetensors beside the checkpoint and no --codebooks FILE: RSA skipped"
        )
    else:
        books, book_note, book_digest = _load_codebooks(book_path, new)
    return Checkpoint(
        path=path,
        store=store,
        config=config,
        tokenizer=tok,
        sidecar=side,
        new=new,
        matrices=matrices,
        tied=tied,
        codebooks=books,
        codebooks_path=book_path if books else None,
        codebooks_note=book_note,
        notes=notes,
        adapter=adapter.provenance() if adapter is not None else {},
        stack=detect_stack(
            roots,
            config,
            side.provenance if side else None,
            adapter.provenance() if adapter is not None else None,
        ),  # fmt: skip
        base=base_ckpt,
        _codebook_digest=book_digest,
    )


def check_rows(
    ckpt: Checkpoint, matrix: Matrix, rows: np.ndarray, allow_nonfinite: bool
) -> np.ndarray:
    """Reject NaN/Inf rows (unless allowed: then they are dropped) and all-zero rows.

    Returns a boolean mask of the rows kept.
    """
    where = ckpt.store.file_of(matrix.tensor)
    finite = np.isfinite(rows).all(axis=1)
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
    zero = finite & ~np.any(rows != 0, axis=1)
    if zero.any():
        bad = ckpt.new.ids[zero]
        raise InputError(
            where,
            f"{bad.size} new-token rows of '{matrix.tensor}' are all zero (ids {bad[:5].tolist()}): "
            "never initialized, or zero-initialized (a collapse); directions of zero rows are undefined",
        )
    return finite
