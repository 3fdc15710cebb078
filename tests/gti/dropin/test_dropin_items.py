"""The item-text files of the frameworks, read as they write them, and the texts made of
their fields (``gti.dropin.items``); description-mean over a framework's index."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from geodiag.errors import InputError
from gti.dropin.index import IndexTokens
from gti.dropin.items import item_texts
from gti.init.context import InitContext
from gti.init.description import description_mean_init


def test_lcrec_item_json_title_and_description_by_default(tmp_path):
    path = tmp_path / "Toys.item.json"
    record = {
        "title": "Red car",
        "description": "A toy car.",
        "brand": "Acme",
        "categories": ["Toys", "Cars"],
    }
    path.write_text(json.dumps({"7": record, "8": {"title": "", "description": ""}}))
    assert item_texts(path) == {"7": "Red car. Description: A toy car.", "8": ""}
    fields = ("title", "brand", "categories")
    assert item_texts(path, fields)["7"] == "Red car. Brand: Acme. Categories: Toys, Cars."
    with pytest.raises(InputError, match="no field 'colour'"):
        item_texts(path, ("title", "colour"))


def test_json_lines_item_and_text(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text('{"item": 1, "text": "first"}\n\n{"item": "b", "text": "second"}\n')
    assert item_texts(path) == {"1": "first", "b": "second"}
    path.write_text('{"item": 1, "text": "first"}\nnot json\n')
    with pytest.raises(InputError, match=r"items.jsonl:2"):
        item_texts(path)


def test_parquet_files_of_openonerec_and_semantic_ids_llm(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    captions = tmp_path / "pid2caption.parquet"
    pq.write_table(pa.table({"pid": [3, 4], "dense_caption": ["a lamp", "a desk"]}), captions)
    assert item_texts(captions) == {"3": "a lamp", "4": "a desk"}
    table = {
        "parent_asin": ["B01"],
        "title": ["Lamp"],
        "description_text": ["Warm light"],
        "price": [3.0],
    }
    items = tmp_path / "items.parquet"
    pq.write_table(pa.table(table), items)
    assert item_texts(items) == {"B01": "Lamp. Description text: Warm light."}
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"id": [1]}), other)
    with pytest.raises(InputError, match="needs one of the columns"):
        item_texts(other)


def test_description_mean_over_an_index_is_the_mean_of_its_items_text_vectors():
    """Against a hand-written reference: each token's row = the mean over the items carrying
    it of (the mean of the item text's token rows); a token no item with text carries = the
    mean over all item vectors."""
    from gti.models.tiny import build_tiny_tokenizer

    texts = {"1": "red car", "2": "blue car", "3": "red lamp"}
    tokenizer = build_tiny_tokenizer(list(texts.values()))
    index = IndexTokens(
        path=None,  # type: ignore[arg-type]
        items={
            "1": ("<a_0>", "<b_1>"),
            "2": ("<a_1>", "<b_1>"),
            "3": ("<a_0>", "<b_0>"),
            "4": ("<a_2>", "<b_0>"),
        },
    )
    old = torch.randn(
        len(tokenizer), 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    slots = dict(zip(index.items, index.slots(list(index.items)), strict=True))
    context = InitContext(item_texts=texts, tokenizer=tokenizer, item_slots=slots)
    rows = description_mean_init(
        old=old, n_new=len(index.tokens), generator=torch.Generator(), context=context
    )

    emb = old.numpy()
    vec = {
        i: emb[tokenizer(t, add_special_tokens=False)["input_ids"]].mean(0)
        for i, t in texts.items()
    }
    expected = {
        "<a_0>": (vec["1"] + vec["3"]) / 2,
        "<a_1>": vec["2"],
        "<a_2>": np.mean(list(vec.values()), axis=0),  # item 4 has no text
        "<b_0>": vec["3"],
        "<b_1>": (vec["1"] + vec["2"]) / 2,
    }
    assert index.tokens == list(expected)
    np.testing.assert_allclose(rows.numpy(), np.stack(list(expected.values())), rtol=1e-12)
