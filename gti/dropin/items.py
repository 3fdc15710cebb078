"""The item texts of a framework's catalog, as the framework writes them: one module-level
table of formats (``FORMATS``), each with how it is recognised, which column is the item
id, and which fields make the text by default (``--text-fields`` overrides).

- ``lcrec-json``: LC-Rec / MiniOneRec ``{dataset}.item.json``, one JSON object
  ``{"<item>": {"title", "description", "brand", "categories"}, ...}``.
- ``jsonl``: one ``{"item": ..., "text": ...}`` object per line.
- ``openonerec-parquet``: OpenOneRec's ``pid2caption.parquet`` (``pid``, ``dense_caption``).
- ``sidllm-parquet``: semantic-ids-llm's items parquet (``parent_asin``, ``title``,
  ``description_text``, ...).

The text of an item is its first field as a title, then ``Field: value`` for the others
(``gti.data.catalog.render_text``), lists joined with commas. Item ids are strings, as the
SID maps key them. Parquet needs pyarrow (``pip install pyarrow``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from geodiag.errors import InputError
from gti.data.catalog import render_text
from gti.data.user_files import field_text

Record = dict[str, object]


@dataclass(frozen=True)
class ItemFormat:
    name: str
    framework: str
    id_field: str
    default_fields: tuple[str, ...]
    suffix: str  # what the file name ends with
    records: Callable[[Path], Iterator[tuple[str, Record]]]  # (item id, fields)


def _json_object(path: Path) -> Iterator[tuple[str, Record]]:
    data = _read_json(path)
    if not isinstance(data, dict):
        raise InputError(path, "expected a JSON object mapping each item to its fields")
    for item, fields in data.items():
        if not isinstance(fields, dict):
            raise InputError(path, f"item {item!r}: expected an object of fields")
        yield str(item), fields


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(path, f"not a JSON file ({e})") from None


def _json_lines(path: Path) -> Iterator[tuple[str, Record]]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{n}", f"not a JSON object ({e.msg})") from None
            if not isinstance(obj, dict) or "item" not in obj:
                raise InputError(f"{path}:{n}", "expected an object with an 'item' field")
            yield str(obj["item"]), obj


def _parquet(id_field: str) -> Callable[[Path], Iterator[tuple[str, Record]]]:
    def records(path: Path) -> Iterator[tuple[str, Record]]:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise InputError(path, "reading parquet needs pyarrow: pip install pyarrow") from None
        try:
            table = pq.read_table(path)
        except Exception as e:  # pyarrow raises its own error types for bad files
            raise InputError(path, f"not a parquet file ({type(e).__name__})") from None
        if id_field not in table.column_names:
            raise InputError(path, f"no '{id_field}' column (columns: {table.column_names})")
        for row in table.to_pylist():
            yield str(row[id_field]), row

    return records


FORMATS = {
    f.name: f
    for f in (
        ItemFormat(
            "lcrec-json",
            "LC-Rec / MiniOneRec",
            "",
            ("title", "description"),
            ".json",
            _json_object,
        ),
        ItemFormat("jsonl", "plain JSON lines", "item", ("text",), ".jsonl", _json_lines),
        ItemFormat(
            "openonerec-parquet",
            "OpenOneRec",
            "pid",
            ("dense_caption",),
            ".parquet",
            _parquet("pid"),
        ),
        ItemFormat(
            "sidllm-parquet",
            "semantic-ids-llm",
            "parent_asin",
            ("title", "description_text"),
            ".parquet",
            _parquet("parent_asin"),
        ),
    )
}


def recognise(path: Path) -> ItemFormat:
    """The format of an item file: by suffix, and for parquet by its id column."""
    if not path.is_file():
        raise InputError(path, "file not found")
    if path.name.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq

            columns = set(pq.read_schema(path).names)
        except ImportError:
            raise InputError(path, "reading parquet needs pyarrow: pip install pyarrow") from None
        except Exception as e:
            raise InputError(path, f"not a parquet file ({type(e).__name__})") from None
        for f in FORMATS.values():
            if f.suffix == ".parquet" and f.id_field in columns:
                return f
        ids = [f.id_field for f in FORMATS.values() if f.suffix == ".parquet"]
        raise InputError(path, f"a parquet item file needs one of the columns {ids}")
    for f in FORMATS.values():
        if path.name.endswith(f.suffix):
            return f
    raise InputError(path, f"unknown item file; expected one of: {describe_formats()}")


def describe_formats() -> str:
    return "; ".join(
        f"{f.framework} {f.suffix} (text: {','.join(f.default_fields)})" for f in FORMATS.values()
    )


def item_texts(path: Path, fields: tuple[str, ...] | None = None) -> dict[str, str]:
    """item id -> text, from ``fields`` (None: the format's default). An item whose fields
    are all empty maps to ``""`` (the caller decides what too many of those means)."""
    fmt = recognise(path)
    fields = fields or fmt.default_fields
    out: dict[str, str] = {}
    seen_fields: set[str] = set()
    for item, record in fmt.records(path):
        seen_fields.update(record)
        title = field_text(record.get(fields[0]))
        # render_text ends the text with a full stop: a value's own would double it
        rest = {k: field_text(record.get(k)).rstrip(".") for k in fields[1:]}
        out[item] = render_text(title, rest) if len(fields) > 1 else title
    unknown = [f for f in fields if f not in seen_fields]
    if out and unknown:
        raise InputError(
            "--text-fields",
            f"{path} has no field {unknown[0]!r} (fields: {', '.join(sorted(seen_fields))})",
        )
    return out
