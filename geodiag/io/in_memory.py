"""Rows in memory opened for the one assembly (:mod:`geodiag.io.assembly`).

A model, a torch tensor or a numpy array holds the rows; the small files that say what
they are (``semantic_ids.json``, a framework's SID map, ``codebooks.safetensors``, the
tokenizer's files, the init checkpoint the sidecar names) sit in the folder the model was
loaded from. That folder is, in order: the one the caller names (``folder=``); else the
tokenizer's ``name_or_path``, then the model's, when it is a local folder whose files
describe the rows in memory (a sidecar whose token ids have rows, and, with a tokenizer,
name the same tokens). A folder that does not describe them is passed over with a note;
``folder=False`` looks for none. Without one, the notes say what could not be known.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.assembly import Matrix, Opened
from geodiag.io.formats.memory import MemoryStore, array_matrix, is_torch, model_matrices
from geodiag.io.vocabulary import sidecar as sidecar_mod
from geodiag.io.vocabulary.tokenizer import TokenizerInfo, tokenizer_in_memory

# What the in-memory route cannot know without the folder the rows were loaded from.
NO_FOLDER = (
    "rows in memory, with no folder found to describe them (model.name_or_path, "
    "tokenizer.name_or_path): no semantic_ids.json, SID map or codebooks read, so dead codes "
    "are not told apart and no init is known to measure the movement from; pass "
    "folder='path/to/checkpoint' (or levels=, codebooks=, reference=)"
)


class TokenNames:
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


def _candidates(source, tokenizer) -> list[Path]:
    """Local folders the tokenizer and the model say they were loaded from, in order."""
    said = [
        getattr(tokenizer, "name_or_path", None),
        getattr(source, "name_or_path", None),
        getattr(getattr(source, "config", None), "_name_or_path", None),
    ]
    out = []
    for s in said:
        if isinstance(s, str | os.PathLike) and str(s) and Path(s).is_dir():
            if Path(s) not in out:
                out.append(Path(s))
    return out


def _describes(folder: Path, n_rows: int, tok: TokenizerInfo | None) -> str | None:
    """Why the sidecar in ``folder`` does not describe rows in memory (None: it does, or
    there is none)."""
    path = folder / sidecar_mod.FILENAME
    if not path.is_file():
        return None
    side = sidecar_mod.load(path)
    if not side.has_token_ids:
        return None
    ids = [t for lv in side.levels for t in lv.token_ids if t >= 0]
    if ids and max(ids) >= n_rows:
        return f"its token ids reach {max(ids)}, past the {n_rows} rows in memory"
    if tok is not None and tok.added:
        names = {t.id: t.content for t in tok.added}
        for lv in side.levels:
            for code, t in enumerate(lv.token_ids):
                if t >= 0 and t in names and names[t] != lv.token(code):
                    return (
                        f"id {t} is '{names[t]}' in the tokenizer given, '{lv.token(code)}' there"
                    )
    return None


def open_in_memory(source, tokenizer=None, folder=None, probe_ids=None) -> Opened:
    """``source`` (a model, a (vocab, dim) tensor or array) as :class:`Opened`, with the
    files of its folder (module docstring). ``probe_ids``: rows that tell whether a wrapped
    model's head is tied (:func:`geodiag.io.formats.memory.model_matrices`)."""
    # A tokenizer that only names rows (no added_tokens_decoder) says nothing of which are new.
    tok = tokenizer_in_memory(tokenizer) if hasattr(tokenizer, "added_tokens_decoder") else None
    chosen, notes = _folder(source, tokenizer, folder, tok)
    if probe_ids is None and chosen is not None and (chosen / sidecar_mod.FILENAME).is_file():
        side = sidecar_mod.load(chosen / sidecar_mod.FILENAME)
        probe_ids = np.sort([t for lv in side.levels for t in lv.token_ids if t >= 0])
    if hasattr(source, "get_input_embeddings"):
        arrays, tied = model_matrices(source, probe_ids)
        description = f"model {type(source).__name__}"
    else:
        arrays, tied = [array_matrix("embedding", source)], True
        description = "torch tensor" if is_torch(source) else "numpy array"
    roles = ("input", "output")
    matrices = [
        Matrix(r, m.name, m.dtype, m.shape[0], m.shape[1])
        for r, m in zip(roles, arrays, strict=False)
    ]
    if chosen is not None:
        why = _describes(chosen, matrices[0].n_rows, tok)
        if why is not None and folder is not None:
            raise InputError(folder, f"{sidecar_mod.FILENAME} does not describe the rows: {why}")
        if why is not None:
            notes.append(f"{chosen} not used to describe the rows in memory: {why}")
            chosen = None
    config = getattr(source, "config", None)
    config = config.to_dict() if hasattr(config, "to_dict") else None
    return Opened(
        path=chosen or Path(f"<{description}>"),
        store=MemoryStore(arrays, f"in-memory {description}"),
        roots=[chosen] if chosen is not None else [],
        location=f"<{description}>" + (f" loaded from {chosen}" if chosen else ""),
        notes=notes if chosen is not None or folder is False else [*notes, NO_FOLDER],
        config=config,
        tokenizer=tok,
        names=TokenNames({}, tokenizer) if tokenizer is not None else None,
        matrices=matrices,
        tied=tied,
    )


def _folder(source, tokenizer, folder, tok) -> tuple[Path | None, list[str]]:
    """(the folder whose files describe ``source``, notes)."""
    if folder is False:
        return None, []
    if folder is not None:
        path = Path(folder)
        if not path.is_dir():
            raise InputError("folder", f"{path}: no such folder")
        return path, [f"files from {path} (folder=)"]
    found = _candidates(source, tokenizer)
    return (found[0], []) if found else (None, [])
