"""The ``semantic_ids.json`` sidecar: which new tokens are SIDs, by level and code.

Written by ``gti`` next to every checkpoint (and by ``gti sids build`` before the
vocabulary exists, with ``token_ids`` left empty); read by ``geodiag``. Pure Python:
no torch, so the CI gate stays light.
"""

from __future__ import annotations

import json
import os
import string
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from geodiag.atomic import atomic_write
from geodiag.errors import InputError
from geodiag.jsonio import read_json

FILENAME = "semantic_ids.json"
CODEBOOKS_FILENAME = "codebooks.safetensors"
FORMAT = "geodiag.semantic_ids"
FORMAT_VERSION = 1
# provenance key: the checkpoint this one was trained from (gti sft: its init), as a path
# relative to the checkpoint's folder, so the two can move together
INIT_CHECKPOINT = "init_checkpoint"


def level_name(index: int) -> str:
    """Level 0 -> 'a', 1 -> 'b', ... (26 levels is far beyond any RQ-VAE in use)."""
    if not 0 <= index < 26:
        raise ValueError(f"level index {index} out of range 0..25")
    return string.ascii_lowercase[index]


def token_string(level: str, code: int) -> str:
    """The token text of one code: ``<a_12>``."""
    return f"<{level}_{code}>"


@dataclass
class Level:
    name: str
    size: int
    # Token id of each code, in code order; empty until the vocabulary is extended. Read
    # from another framework's files (geodiag.io.vocabulary.sid_index): -1 for a code without a token.
    token_ids: list[int] = field(default_factory=list)
    # Token text of each code when not ``<name_code>`` (another framework's spelling:
    # ``<s_a_12>``, ``<|sid_300|>``, 1-based codes); empty: ``token_string``, and not written.
    tokens: list[str] = field(default_factory=list)

    def token(self, code: int) -> str:
        """The token text of ``code``."""
        return self.tokens[code] if self.tokens else token_string(self.name, code)


@dataclass
class SemanticIds:
    base_vocab_size: int | None
    levels: list[Level]
    items: dict[str, list[int]]  # item id -> one code per level
    provenance: dict[str, object] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    @property
    def has_token_ids(self) -> bool:
        return all(len(lv.token_ids) == lv.size for lv in self.levels) and bool(self.levels)

    def token_strings(self) -> list[str]:
        return [lv.token(c) for lv in self.levels for c in range(lv.size)]

    def to_json(self) -> dict:
        out = asdict(self)
        for lv in out["levels"]:
            if not lv["tokens"]:
                lv.pop("tokens")
        return {"format": FORMAT, **out}


def parse(data: object, where: str | os.PathLike[str]) -> SemanticIds:
    """Validate a decoded sidecar; every problem names the file and the field."""
    if not isinstance(data, dict):
        raise InputError(where, "sidecar is not a JSON object")
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise InputError(
            where, f"unsupported format_version {version!r} (expected {FORMAT_VERSION})"
        )
    raw_levels = data.get("levels")
    if not isinstance(raw_levels, list) or not raw_levels:
        raise InputError(where, "'levels' must be a non-empty list")
    levels: list[Level] = []
    for i, lv in enumerate(raw_levels):
        if not isinstance(lv, dict) or not isinstance(lv.get("name"), str):
            raise InputError(where, f"levels[{i}] needs a string 'name'")
        size = lv.get("size")
        if not isinstance(size, int) or size <= 0:
            raise InputError(where, f"levels[{i}] ('{lv['name']}') needs a positive integer 'size'")
        ids = lv.get("token_ids") or []
        if not isinstance(ids, list) or not all(isinstance(t, int) and t >= 0 for t in ids):
            raise InputError(where, f"levels[{i}].token_ids must be a list of non-negative ints")
        if ids and len(ids) != size:
            raise InputError(
                where, f"levels[{i}] ('{lv['name']}') has size {size} but {len(ids)} token_ids"
            )
        tokens = lv.get("tokens") or []
        if (
            not isinstance(tokens, list)
            or not all(isinstance(t, str) for t in tokens)
            or (tokens and len(tokens) != size)
        ):
            raise InputError(where, f"levels[{i}].tokens must be {size} token strings")
        levels.append(Level(name=lv["name"], size=size, token_ids=list(ids), tokens=list(tokens)))
    all_ids = [t for lv in levels for t in lv.token_ids]
    if len(set(all_ids)) != len(all_ids):
        raise InputError(where, "token_ids repeat across levels/codes")
    items = data.get("items", {})
    if not isinstance(items, dict):
        raise InputError(where, "'items' must map item id -> list of codes")
    for item, codes in items.items():
        if not isinstance(codes, list) or len(codes) != len(levels):
            raise InputError(where, f"item {item!r} needs {len(levels)} codes, got {codes!r}")
        for lv, c in zip(levels, codes, strict=True):
            if not isinstance(c, int) or not 0 <= c < lv.size:
                raise InputError(
                    where,
                    f"item {item!r}: code {c!r} out of range for level '{lv.name}' (size {lv.size})",
                )
    base = data.get("base_vocab_size")
    if base is not None and (not isinstance(base, int) or base <= 0):
        raise InputError(where, f"base_vocab_size must be a positive int, got {base!r}")
    prov = data.get("provenance") or {}
    if not isinstance(prov, dict):
        raise InputError(where, "'provenance' must be an object")
    return SemanticIds(
        base_vocab_size=base,
        levels=levels,
        items={str(k): list(v) for k, v in items.items()},
        provenance=prov,
        format_version=version,
    )


def load(path: str | os.PathLike[str]) -> SemanticIds:
    """Read and validate ``semantic_ids.json`` (a file, or a folder holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / FILENAME
    data = read_json(p)
    return parse(data, p)


def with_init(
    sids: SemanticIds, init: str | os.PathLike[str], folder: str | os.PathLike[str]
) -> SemanticIds:
    """``sids`` with ``init``, the checkpoint it was trained from, in its provenance,
    relative to ``folder`` (where the sidecar is published): geodiag's movement reference."""
    rel = os.path.relpath(Path(init).resolve(), Path(folder).resolve())
    return replace(sids, provenance={**sids.provenance, INIT_CHECKPOINT: Path(rel).as_posix()})


def init_checkpoint(sids: SemanticIds, folder: str | os.PathLike[str]) -> Path | None:
    """The checkpoint ``sids`` says it was trained from, resolved against ``folder``; None
    when it names none (whether it exists is the caller's question)."""
    rel = sids.provenance.get(INIT_CHECKPOINT)
    return Path(os.path.normpath(Path(folder) / rel)) if isinstance(rel, str) and rel else None


def write_description(
    folder: str | os.PathLike[str],
    sids: SemanticIds,
    codebooks: str | os.PathLike[str] | Mapping[str, object] | None,
) -> None:
    """Describe a checkpoint folder as the contract has it (DESIGN.md), for gti's writer and
    the Trainer callback alike: ``codebooks.safetensors`` (a copy of a file, or arrays as
    float32 ``[codes, code_dim]``; one already there is kept; None: none), then
    ``semantic_ids.json``, last, so that a reader who finds it finds the codebooks too."""
    folder = Path(folder)
    dest = folder / CODEBOOKS_FILENAME
    if codebooks is not None and not dest.exists():
        if isinstance(codebooks, str | os.PathLike):
            atomic_write(dest, Path(codebooks).read_bytes())
        else:
            import numpy as np

            from geodiag.io.formats.safetensors import save_file

            save_file({str(k): np.asarray(v, dtype=np.float32) for k, v in codebooks.items()}, dest)
    save(sids, folder / FILENAME)


def save(sids: SemanticIds, path: str | os.PathLike[str]) -> Path:
    """Write atomically (temporary file + rename): a reader never sees half a sidecar."""
    p = Path(path)
    if p.is_dir():
        p = p / FILENAME
    p.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(p, json.dumps(sids.to_json(), indent=1, allow_nan=False))
