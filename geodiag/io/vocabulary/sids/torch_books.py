"""Codebooks inside a ``torch.save`` file (``.pt``, ``.pth``, ``.ckpt``), read without torch
and without running anything it carries: ``data.pkl`` unpickled by ``torch_zip``'s
restricted unpickler with only the globals the frameworks' own files hold, as inert
stand-ins (:data:`GLOBALS`): LC-Rec's ``argparse.Namespace`` of arguments, the ``pathlib``
paths in semantic-ids-llm's config, Lightning's ``AttributeDict`` of hyper-parameters.
Anything else (a pickled model object, a planted payload) is refused, exit 2, naming the
global. The state dict is found under the keys the frameworks use; each codebook dialect
names the key pattern of its levels (``books_from_state``)."""

from __future__ import annotations

import pickle
import re
from functools import lru_cache, partial
from pathlib import Path

from geodiag.errors import InputError
from geodiag.io.formats.torch_zip import (
    TENSOR_GLOBALS,
    Archive,
    StateDict,
    StoredTensor,
    open_archive,
    record,
)
from geodiag.io.sources.byte_ranges import LocalFile
from geodiag.io.vocabulary.sids.base import Dialect, SidCodebooks, register_codebooks

ZIP_MAGIC = b"PK\x03\x04"
WRITER = "an RQ-VAE / k-means training script"
# Where the frameworks keep the state dict inside the saved dict (LC-Rec, GRID's Lightning:
# state_dict; semantic-ids-llm: model_state_dict; RQ-VAE-Recommender: model).
STATE_KEYS = ("state_dict", "model_state_dict", "model")


def _path(*parts: object) -> str:
    """A pickled ``pathlib`` path, as its text (nothing of pathlib run)."""
    if not all(isinstance(p, str) for p in parts):
        raise pickle.UnpicklingError(f"a path of {parts!r:.80}")
    return "/".join(parts).replace("//", "/")


class AttributeDict(StateDict):
    """Lightning's hyper-parameter dict: a dict, its attributes ignored."""

    def __setstate__(self, state: object) -> None:
        if isinstance(state, dict):
            self.update(state)


_PATHS = ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path")
GLOBALS: dict[tuple[str, str], object] = {
    **TENSOR_GLOBALS,
    ("argparse", "Namespace"): record("Namespace"),
    **{(module, name): _path for module in ("pathlib", "pathlib._local") for name in _PATHS},
    **{
        (module, "AttributeDict"): AttributeDict
        for module in (
            "lightning.fabric.utilities.data",
            "lightning_fabric.utilities.data",
            "pytorch_lightning.utilities.parsing",
        )
    },
}


def is_torch_save(head: bytes) -> bool:
    return head.startswith(ZIP_MAGIC) and b"data.pkl" in head


# What to save instead when a file pickles more than tensors and plain values.
INSTEAD = (
    "save the codebooks' state dict alone (torch.save({'state_dict': model.state_dict()}, "
    "path)) and pass that file"
)


@lru_cache(maxsize=8)
def _open(path: Path, mtime: float) -> tuple[Archive, dict[str, StoredTensor]]:
    try:
        archive = open_archive(LocalFile(path), GLOBALS, WRITER)
    except InputError as e:
        if e.problem.startswith("refused"):
            raise InputError(path, f"{e.problem}; {INSTEAD}") from None
        raise
    return archive, state_dict(archive.obj)


def load(path: Path) -> tuple[Archive, dict[str, StoredTensor]]:
    """The archive and its state dict (name -> tensor), cached while the file is unchanged."""
    return _open(path, path.stat().st_mtime)


# torch.compile's wrapper names a compiled module's state ``_orig_mod.<name>``
# (semantic-ids-llm's best_model.pth); its loaders drop the prefix, and so does this one.
COMPILED_PREFIX = "_orig_mod."


def state_dict(obj: object) -> dict[str, StoredTensor]:
    """The tensors of the saved dict's state dict: under one of :data:`STATE_KEYS`, else
    the dict's own tensors (a plain ``model.state_dict()``); torch.compile's
    :data:`COMPILED_PREFIX` dropped, as the frameworks' loaders drop it."""
    if not isinstance(obj, dict):
        return {}
    tensors = {str(k): v for k, v in obj.items() if isinstance(v, StoredTensor)}
    for key in STATE_KEYS:
        inner = obj.get(key)
        if isinstance(inner, dict) and any(isinstance(v, StoredTensor) for v in inner.values()):
            tensors = {str(k): v for k, v in inner.items() if isinstance(v, StoredTensor)}
            break
    if any(k.startswith(COMPILED_PREFIX) for k in tensors):
        return {k.replace(COMPILED_PREFIX, ""): v for k, v in tensors.items()}
    return tensors


def matches(path: Path, head: bytes, pattern: re.Pattern[str]) -> bool:
    """A torch.save file whose state dict has level 0 of ``pattern`` (``(\\d+)``: the level)."""
    if not is_torch_save(head):
        return False
    return any(pattern.match(k) for k in load(path)[1])


def books_from_state(
    path: Path, pattern: re.Pattern[str], *, dialect: str, framework: str
) -> SidCodebooks:
    """One codebook per level from the tensors named by ``pattern``, levels 0, 1, ... in order."""
    archive, tensors = load(path)
    levels = {int(m[1]): name for name in tensors if (m := pattern.match(name))}
    if sorted(levels) != list(range(len(levels))) or not levels:
        raise InputError(
            path, f"codebook tensors {pattern.pattern} for levels {sorted(levels)}: expected 0..L-1"
        )
    books = []
    for level in range(len(levels)):
        t = tensors[levels[level]]
        if len(t.size) != 2 or not t.dtype.startswith(("F", "B")) or t.dtype == "BOOL":
            raise InputError(
                path, f"'{levels[level]}' is {t.dtype} {list(t.size)}, not a [codes, dim] float"
            )
        books.append(archive.values(t, levels[level]).astype("float64"))
    detected = [f"codebooks: {len(books)} levels from '{pattern.pattern}'"]
    return SidCodebooks(path, dialect, framework, books, detected)


# Each state-dict dialect's framework and level pattern, by dialect name: also how a
# framework's codebooks are found in a safetensors file of its whole model (``safetensors_books``).
STATE_PATTERNS: dict[str, tuple[str, re.Pattern[str]]] = {}


def register_state_books(
    name: str, framework: str, pattern: str, usual_names: tuple[str, ...]
) -> Dialect:
    """A codebook dialect kept in a torch.save state dict, registered: recognised by the
    level-0 tensor ``pattern`` names (``(\\d+)``: the level), read by :func:`books_from_state`."""
    levels = re.compile(pattern)
    STATE_PATTERNS[name] = (framework, levels)
    return register_codebooks(
        Dialect(
            name,
            framework,
            lambda p, h: matches(p, h, levels),
            partial(books_from_state, pattern=levels, dialect=name, framework=framework),
            usual_names=usual_names,
        )
    )
