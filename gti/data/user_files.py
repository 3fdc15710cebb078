"""A user's own catalog: items as JSONL, interactions as CSV or TSV.

Catalog, one JSON object per line::

    {"item_id": "sku-1", "title": "Linen shirt", "description": "...", "color": "blue"}

``item_id`` is required (string or integer). The text is ``text`` verbatim when
given, else rendered from ``title`` and every other non-empty field in file order
(lists are joined with commas). An item with no text at all is an error.

Interactions, a header line then one row per event (``.tsv`` = tab, else comma)::

    user_id,item_id,timestamp
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

from geodiag.errors import InputError
from gti.data.catalog import (
    Catalog,
    Dataset,
    Interaction,
    Item,
    build_catalog,
    build_interactions,
    render_text,
)

INTERACTION_COLUMNS = ("user_id", "item_id", "timestamp")


def field_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(field_text(v) for v in value if field_text(v))
    if isinstance(value, dict):
        return "; ".join(f"{k}: {field_text(v)}" for k, v in value.items() if field_text(v))
    return str(value).strip()


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text ({e})") from None


def load_catalog(path: str | Path) -> Catalog:
    path = Path(path)
    items, lines = [], []
    for n, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(where, f"not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise InputError(where, "each line must be a JSON object")
        raw_id = obj.get("item_id")
        if isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or str(raw_id) == "":
            raise InputError(where, "missing or invalid 'item_id' (a string or integer)")
        title = field_text(obj.get("title"))
        attributes = {
            k: field_text(v)
            for k, v in obj.items()
            if k not in ("item_id", "title", "text") and field_text(v)
        }
        text = field_text(obj.get("text")) or render_text(title, attributes)
        items.append(Item(item_id=str(raw_id), title=title, text=text, attributes=attributes))
        lines.append(n)
    return build_catalog(items, str(path), lines=lines)


def load_interactions(path: str | Path, catalog: Catalog) -> list[Interaction]:
    path = Path(path)
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    rows = list(csv.reader(_read_lines(path), delimiter=delimiter))
    if not rows:
        raise InputError(path, f"empty file (expected a header {','.join(INTERACTION_COLUMNS)})")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in INTERACTION_COLUMNS if c not in header]
    if missing:
        raise InputError(
            path, f"header lacks {missing} (got {header}; delimiter {delimiter!r} from the suffix)"
        )
    cols = [header.index(c) for c in INTERACTION_COLUMNS]

    def fields() -> Iterator[tuple[int, str, str, str]]:
        for n, row in enumerate(rows[1:], start=2):
            if not row or not "".join(row).strip():
                continue
            if len(row) != len(header):
                raise InputError(f"{path}:{n}", f"expected {len(header)} fields, got {len(row)}")
            user, item, ts = (row[c].strip() for c in cols)
            yield n, user, item, ts

    return build_interactions(fields(), catalog, str(path))


def load(catalog_path: str | Path, interactions_path: str | Path) -> Dataset:
    catalog = load_catalog(catalog_path)
    interactions = load_interactions(interactions_path, catalog)
    return Dataset(
        Path(catalog_path).stem, catalog, interactions, interactions_source=str(interactions_path)
    )
