"""The item catalog and the interaction log: what every gti stage reads.

An item has an id, a title, free-form attributes and one rendered ``text``; that
text is what the backbone encodes for semantic IDs and what grounding pairs with
the SID tokens, so it is rendered once, here, and never re-derived downstream.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from geodiag.errors import InputError


@dataclass(frozen=True)
class Item:
    item_id: str
    title: str
    text: str  # rendered description fed to the backbone
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Interaction:
    user_id: str
    item_id: str
    timestamp: int  # seconds; only the order matters


@dataclass
class Catalog:
    items: list[Item]
    source: str  # where it came from (file, dataset name), used in error messages

    def __post_init__(self) -> None:
        self._index = {it.item_id: i for i, it in enumerate(self.items)}

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._index

    @property
    def item_ids(self) -> list[str]:
        return [it.item_id for it in self.items]

    @property
    def texts(self) -> list[str]:
        return [it.text for it in self.items]

    def index(self, item_id: str) -> int:
        return self._index[item_id]


@dataclass
class Dataset:
    """A catalog and the interactions over it, validated together."""

    name: str
    catalog: Catalog
    interactions: list[Interaction]
    interactions_source: str = ""


def render_text(title: str, attributes: dict[str, str]) -> str:
    """``Title. Key: value. Key: value.`` with empty parts dropped."""
    parts = [title.strip().rstrip(".")] if title.strip() else []
    parts += [
        f"{k.replace('_', ' ').capitalize()}: {v.strip()}"
        for k, v in attributes.items()
        if v.strip()
    ]
    return ". ".join(parts) + "." if parts else ""


def build_catalog(items: list[Item], source: str, lines: list[int] | None = None) -> Catalog:
    """Check the catalog-level invariants and return it.

    ``lines`` (1-based, parallel to ``items``) lets errors point at a line of a file.
    """
    if not items:
        raise InputError(source, "catalog is empty: no items to build semantic IDs for")
    first: dict[str, int] = {}
    for pos, it in enumerate(items):
        where = f"{source}:{lines[pos]}" if lines else source
        if not it.item_id:
            raise InputError(where, "item with an empty item_id")
        if it.item_id in first:
            prev = lines[first[it.item_id]] if lines else first[it.item_id]
            raise InputError(
                where,
                f"duplicate item_id {it.item_id!r} (first seen at {'line' if lines else 'item'} {prev})",
            )
        first[it.item_id] = pos
        if not it.text.strip():
            raise InputError(
                where, f"item {it.item_id!r} has no text (give it a title or description)"
            )
    return Catalog(items=items, source=source)


def check_interactions(
    catalog: Catalog, interactions: list[Interaction], source: str, lines: list[int] | None = None
) -> None:
    """Every interaction must name a catalog item; the error counts all offenders."""
    unknown = [i for i, x in enumerate(interactions) if x.item_id not in catalog]
    if unknown:
        pos = unknown[0]
        where = f"{source}:{lines[pos]}" if lines else source
        raise InputError(
            where,
            f"item_id {interactions[pos].item_id!r} is not in the catalog {catalog.source} "
            f"({len(unknown)} interaction(s) name unknown items)",
        )


def build_interactions(
    rows: Iterable[tuple[int, str, str, str]], catalog: Catalog, source: str
) -> list[Interaction]:
    """Interactions from ``(line, user_id, item_id, timestamp)`` rows of file ``source``,
    checked against ``catalog``. A timestamp is a number of seconds (``"881250949"``,
    ``"8.8e8"``; the fraction is dropped). Rows are taken one at a time: when ``rows`` is
    a generator that checks its own lines, the first bad line is the one named."""
    out, lines = [], []
    for n, user, item, ts in rows:
        try:
            stamp = int(float(ts))
        except ValueError:
            raise InputError(f"{source}:{n}", f"timestamp {ts!r} is not a number") from None
        out.append(Interaction(user_id=user, item_id=item, timestamp=stamp))
        lines.append(n)
    check_interactions(catalog, out, source, lines=lines)
    return out
