"""Strict JSON for result dataclasses: no NaN, no Infinity, numpy scalars unwrapped."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

# Field metadata key: a dataclass field the JSON leaves out (another field says it, as a
# check result's shown name says its check and level).
JSON_SKIP = "geodiag.jsonio.skip"


def to_jsonable(obj: object) -> object:
    """Dataclasses -> dicts, numpy -> Python; a non-finite float is a bug, so it raises."""
    kind = type(obj)
    if kind is str or kind is int or kind is bool or obj is None:  # most of a report
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {name: to_jsonable(getattr(obj, name)) for name in _json_fields(kind)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        if all(type(v) is int or (type(v) is float and math.isfinite(v)) for v in obj):
            return list(obj)  # spectra, id lists: one pass, not a call per element
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [to_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"non-finite float {obj!r} in a result: report None with a reason instead")
    if isinstance(obj, Path):
        return str(obj)
    return obj


_FIELDS: dict[type, tuple[str, ...]] = {}


def _json_fields(kind: type) -> tuple[str, ...]:
    """The fields of dataclass ``kind`` the JSON writes, in order (once per class: a
    metrics report holds thousands of small dataclasses, neighbours and token rows)."""
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(
            f.name
            for f in dataclasses.fields(kind)
            if not f.name.startswith("_") and not f.metadata.get(JSON_SKIP)
        )
    return names


def read_document(path: Path, parse, kind: str = "JSON", *, missing: str = "file not found"):
    """``parse`` of a text file's contents; a missing, unreadable, undecodable, invalid or
    too deeply nested file is an :class:`~geodiag.errors.InputError` naming it. ``parse``
    raises ValueError on invalid text (json's and tomllib's errors both are)."""
    from geodiag.errors import InputError, cannot_read, nested_too_deeply

    try:
        return parse(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path, missing) from None
    except OSError as e:
        raise cannot_read(path, e) from None
    except ValueError as e:  # JSONDecodeError, TOMLDecodeError, UnicodeDecodeError
        raise InputError(path, f"not valid {kind} ({e}); truncated or corrupt?") from None
    except RecursionError:
        raise nested_too_deeply(path, kind) from None


def read_json(path: Path) -> object:
    """The document in a JSON file (:func:`read_document`)."""
    return read_document(path, json.loads)


def read_json_object(path: Path) -> dict:
    """A JSON object file (a checkpoint's or an adapter's config); anything else is bad
    input naming the file."""
    from geodiag.errors import InputError, cannot_read, nested_too_deeply

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


def dumps(obj: object, *, indent: int | None = 1) -> str:
    """Strict JSON text of a result, names as they were read (a lone surrogate escaped:
    :func:`geodiag.escape.json_text`)."""
    from geodiag.escape import json_text

    text = json.dumps(to_jsonable(obj), indent=indent, allow_nan=False, ensure_ascii=False)
    return json_text(text)
