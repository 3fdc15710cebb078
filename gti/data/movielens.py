"""MovieLens-100k, as RecBole ships it inside its wheel (``recbole==1.2.1``).

The wheel carries the dataset as RecBole "atomic files": tab-separated, with a
typed header (``item_id:token  movie_title:token_seq  release_year:token
class:token_seq``). ``ml-100k.item`` has 1,682 movies, ``ml-100k.inter`` 100,000
ratings (``user_id:token item_id:token rating:float timestamp:float``). Ratings
are ignored: like TIGER and LC-Rec we treat every rating as an implicit
interaction. Item text is title, year and genres.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from geodiag.atomic import atomic_dir
from geodiag.errors import InputError
from gti.cache import cache_root
from gti.data.catalog import Catalog, Dataset, Interaction, Item, build_catalog, build_interactions
from gti.wheels import extract_from_wheel

NAME = "movielens-100k"
REQUIREMENT = "recbole==1.2.1"
WHEEL_PREFIX = "recbole/dataset_example/ml-100k/"
ITEM_FILE = "ml-100k.item"
INTER_FILE = "ml-100k.inter"
SOURCE_FILE = "source.json"

# "Butcher Boy, The" -> "The Butcher Boy": the LM has seen titles in natural order.
_TRAILING_ARTICLE = re.compile(r"^(.*), (The|A|An|Les|La|Le|L'|Il|Das|Der|Die|El)$")
# RecBole's file spells the one untitled movie (id 267) "unkonwn".
_UNKNOWN = {"unknown", "unkonwn"}


def dataset_dir(cache_dir: str | Path | None = None) -> Path:
    return cache_root(cache_dir) / "data" / NAME


def fetch(cache_dir: str | Path | None = None) -> Path:
    """Download (once) and unpack MovieLens-100k into the cache; return its folder.

    A second call finds the files and returns at once. The folder appears
    atomically, so an interrupted fetch leaves nothing behind.
    """
    target = dataset_dir(cache_dir)
    if (target / ITEM_FILE).is_file() and (target / INTER_FILE).is_file():
        return target
    with atomic_dir(target) as tmp:
        files = extract_from_wheel(REQUIREMENT, lambda m: m.startswith(WHEEL_PREFIX), tmp)
        names = sorted(p.name for p in files)
        if ITEM_FILE not in names or INTER_FILE not in names:
            raise InputError(REQUIREMENT, f"wheel lacks {ITEM_FILE}/{INTER_FILE} (has {names})")
        (tmp / SOURCE_FILE).write_text(
            json.dumps(
                {"requirement": REQUIREMENT, "members": WHEEL_PREFIX, "files": names}, indent=1
            )
        )
    return target


def read_atomic(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Parse a RecBole atomic file: (column names without types, [(line, fields)])."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(path, "file not found (run `gti data fetch movielens-100k`)") from None
    if not lines:
        raise InputError(path, "empty file (no header)")
    columns = [c.split(":", 1)[0] for c in lines[0].split("\t")]
    rows = []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(columns):
            raise InputError(
                f"{path}:{n}", f"expected {len(columns)} tab-separated fields, got {len(fields)}"
            )
        rows.append((n, fields))
    return columns, rows


def _column(columns: list[str], name: str, path: Path) -> int:
    if name not in columns:
        raise InputError(path, f"missing column {name!r} (header has {columns})")
    return columns.index(name)


def render_movie(item_id: str, title: str, year: str, genres: str) -> Item:
    title = title.strip()
    title = "" if title.lower() in _UNKNOWN else _TRAILING_ARTICLE.sub(r"\2 \1", title)
    year = "" if year.strip().lower() in _UNKNOWN else year.strip()
    genre_list = [g for g in genres.split() if g.lower() not in _UNKNOWN]
    head = (
        f"{title} ({year})" if title and year else title or (f"Movie from {year}" if year else "")
    )
    text = head or "Untitled movie"
    if genre_list:
        text += f". Genres: {', '.join(genre_list)}"
    attributes = {"year": year, "genres": ", ".join(genre_list)}
    return Item(item_id=item_id, title=title, text=text + ".", attributes=attributes)


def load_catalog(folder: Path) -> Catalog:
    path = folder / ITEM_FILE
    columns, rows = read_atomic(path)
    i_id, i_title = _column(columns, "item_id", path), _column(columns, "movie_title", path)
    i_year, i_class = _column(columns, "release_year", path), _column(columns, "class", path)
    items = [render_movie(f[i_id], f[i_title], f[i_year], f[i_class]) for _, f in rows]
    return build_catalog(items, str(path), lines=[n for n, _ in rows])


def load_interactions(folder: Path, catalog: Catalog) -> list[Interaction]:
    path = folder / INTER_FILE
    columns, rows = read_atomic(path)
    i_user, i_item = _column(columns, "user_id", path), _column(columns, "item_id", path)
    i_time = _column(columns, "timestamp", path)
    fields = ((n, f[i_user], f[i_item], f[i_time]) for n, f in rows)
    return build_interactions(fields, catalog, str(path))


def load(cache_dir: str | Path | None = None, folder: Path | None = None) -> Dataset:
    """MovieLens-100k from ``folder`` (default: the cache, fetched when missing)."""
    folder = folder if folder is not None else fetch(cache_dir)
    catalog = load_catalog(folder)
    interactions = load_interactions(folder, catalog)
    return Dataset(NAME, catalog, interactions, interactions_source=str(folder / INTER_FILE))
