"""tokenizer.json reader: the fast path (merges never parsed) against json.loads of the whole file."""

import json

import pytest

from geodiag.errors import InputError
from geodiag.io.vocabulary.tokenizer import _read_hf_layout, load_tokenizer

# Token strings that trip a hand-rolled scanner: quotes, backslashes, brackets and braces,
# the key names the reader looks for, unicode escapes (json.dumps writes \u0120 for "Ġ").
TRICKY = [
    '"',
    "\\",
    '\\"',
    "[",
    "]",
    "{",
    "}",
    '"}]}',
    "merges",
    '"merges": [',
    "model",
    "Ġthe",
    "é",
    "😀",
]


def hf_like(*, merges_first=False, with_merges=True, decoder_after_model=False) -> dict:
    vocab = {t: i for i, t in enumerate(["a", "b", *TRICKY])}
    model = {"type": "BPE", "dropout": None, "unk_token": None}
    merges = [["a", "b"], ['"', "}"], ["merges", "["], ["\\", '"merges": [']]
    if with_merges and merges_first:
        model["merges"] = merges
    model["vocab"] = vocab
    if with_merges and not merges_first:
        model["merges"] = merges
    added = [
        {"id": len(vocab), "content": "<|endoftext|>", "special": True},
        {"id": len(vocab) + 1, "content": '<a_"0">', "special": False},
        {"id": len(vocab) + 2, "content": "<b_}]>", "special": False},
    ]
    tok = {"version": "1.0", "truncation": None, "added_tokens": added, "normalizer": None}
    decoder = {"type": "Sequence", "decoders": [{"type": "ByteLevel"}]}
    if decoder_after_model:
        return {**tok, "model": model, "decoder": decoder}
    return {**tok, "decoder": decoder, "model": model}


def reference(text: str) -> tuple:
    """What the reader must return: json.loads of the whole text, read directly."""
    data = json.loads(text)
    vocab = data["model"]["vocab"]
    by_id = (
        {i: s for s, i in vocab.items()}
        if isinstance(vocab, dict)
        else dict(enumerate(p[0] for p in vocab))
    )
    added = [(t["id"], t["content"], t["special"]) for t in data["added_tokens"]]
    kinds = {data["decoder"]["type"]} | {d["type"] for d in data["decoder"].get("decoders", [])}
    return by_id, added, "ByteLevel" in kinds


def read(path) -> tuple:
    info = load_tokenizer(path)
    return info.vocab, [(t.id, t.content, t.special) for t in info.added], info.byte_level


DUMPS = {
    "hf indent 2": lambda d: json.dumps(d, indent=2, ensure_ascii=False),
    "compact ascii": lambda d: json.dumps(d, separators=(",", ":")),  # \uXXXX escapes
    "spaced": lambda d: json.dumps(d, indent="\t") + "\r\n\n",
}


@pytest.mark.parametrize("dump", DUMPS)
def test_hf_layout_is_read_without_merges_and_equals_a_full_parse(tmp_path, dump):
    text = DUMPS[dump](hf_like())
    assert _read_hf_layout(text.encode()) is not None  # the fast path took it
    (tmp_path / "tokenizer.json").write_text(text, encoding="utf-8")
    assert read(tmp_path / "tokenizer.json") == reference(text)


@pytest.mark.parametrize(
    "layout",
    [dict(merges_first=True), dict(with_merges=False), dict(decoder_after_model=True)],
    ids=["merges first", "no merges", "decoder after model"],
)
def test_other_layouts_are_parsed_whole_with_the_same_result(tmp_path, layout):
    text = json.dumps(hf_like(**layout), indent=2)
    assert _read_hf_layout(text.encode()) is None  # not the layout the fast path vouches for
    (tmp_path / "tokenizer.json").write_text(text)
    assert read(tmp_path / "tokenizer.json") == reference(text)


def test_unigram_vocabulary_list(tmp_path):
    tok = hf_like(with_merges=False)
    tok["model"] = {"type": "Unigram", "unk_id": 0, "vocab": [["a", 0.0], ['"]}', -1.5]]}
    text = json.dumps(tok)
    (tmp_path / "tokenizer.json").write_text(text)
    assert read(tmp_path / "tokenizer.json") == reference(text)


@pytest.mark.parametrize("cut", [0.3, 0.7, 0.95])
def test_a_file_cut_short_is_an_error_naming_it(tmp_path, cut):
    """Cut inside added_tokens, vocab, and merges (the part the fast path never parses)."""
    text = json.dumps(hf_like(), indent=2)
    path = tmp_path / "tokenizer.json"
    path.write_text(text[: int(len(text) * cut)])
    with pytest.raises(InputError, match="tokenizer.json.*not valid JSON"):
        load_tokenizer(path)


def test_a_tokenizer_written_by_hf_tokenizers_takes_the_fast_path(tmp_path):
    """The layout the fast path assumes is the one the tokenizers library writes."""
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {t: i for i, t in enumerate(["a", "b", "ab", "Ġ", '"', "}", "]"])}
    bpe = tokenizers.models.BPE(vocab=vocab, merges=[("a", "b")])
    tok = tokenizers.Tokenizer(bpe)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.add_tokens(["<a_0>", '<b_"1">'])
    tok.add_special_tokens(["<|endoftext|>"])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    text = path.read_text(encoding="utf-8")
    assert _read_hf_layout(text.encode()) is not None
    assert read(path) == reference(text)
    assert load_tokenizer(path).token(3) == " "  # byte-level "Ġ"


def test_the_vocabulary_is_decoded_on_first_use_only(tmp_path):
    text = json.dumps(hf_like(), indent=2)
    (tmp_path / "tokenizer.json").write_text(text)
    info = load_tokenizer(tmp_path / "tokenizer.json")
    assert info._vocab is None  # the gate names new rows from added tokens alone
    assert info.token(len(TRICKY) + 3) == '<a_"0">' and info._vocab is None
    assert info.token(2) == TRICKY[0] and info.vocab == reference(text)[0]


HEAD = '{"added_tokens": [], "decoder": null, "model": {"type": "BPE", '
AFTER_VOCAB = {
    "ends like merges without them": HEAD + '"vocab": {"a": 0, "b": 1}, "extra": [1, 2]}}',
    "duplicate vocab": HEAD
    + '"vocab": {"a": 0}, "vocab": {"b": 0, "c": 1}, "merges": [["b", "c"]]}}',
    "a member between": HEAD
    + '"vocab": {"a": 0, "b": 1}, "dropout": null, "merges": [["a", "b"]]}}',
}


@pytest.mark.parametrize("case", AFTER_VOCAB)
def test_what_follows_the_vocabulary_is_checked_when_it_is_decoded(tmp_path, case):
    """The end of the file looked right at load; the lazy decode of the vocabulary finds
    out the rest, and falls back to a full parse (json.loads: the last duplicate wins)."""
    text = AFTER_VOCAB[case]
    (tmp_path / "tokenizer.json").write_text(text)
    assert _read_hf_layout(text.encode()) is not None
    want = {i: s for s, i in json.loads(text)["model"]["vocab"].items()}
    assert load_tokenizer(tmp_path / "tokenizer.json").vocab == want


def test_a_token_named_vocab_before_the_model_is_parsed_whole(tmp_path):
    tok = hf_like()
    tok["added_tokens"].append({"id": 99, "content": "vocab", "special": False})
    text = json.dumps(tok, indent=2)
    assert _read_hf_layout(text.encode()) is None  # the first "vocab" is not the model's
    (tmp_path / "tokenizer.json").write_text(text)
    assert read(tmp_path / "tokenizer.json") == reference(text)


def test_bad_utf8_in_the_vocabulary_is_an_error_naming_the_file_when_read(tmp_path):
    raw = json.dumps(hf_like(), indent=2, ensure_ascii=False).encode()
    raw = raw.replace("é".encode(), b"\xff")  # "é" is a vocabulary token
    path = tmp_path / "tokenizer.json"
    path.write_bytes(raw)
    info = load_tokenizer(path)  # added tokens and decoder come before the vocabulary
    assert [t.content for t in info.added_non_special()] == ['<a_"0">', "<b_}]>"]
    with pytest.raises(InputError, match="tokenizer.json.*not valid UTF-8"):
        _ = info.vocab


@pytest.mark.parametrize("dump", [*DUMPS, "hf, ids out of order", "hf, crlf"])
def test_single_tokens_read_line_by_line_equal_the_full_vocabulary(tmp_path, dump):
    """Neighbour display reads single entries straight from the file where each line holds
    one, in id order (what tokenizers writes); anything else decodes the vocabulary."""
    tok = hf_like()
    if dump == "hf, ids out of order":
        tok["model"]["vocab"] = dict(reversed(tok["model"]["vocab"].items()))
    text = DUMPS.get(dump, DUMPS["hf indent 2"])(tok)
    if dump == "hf, crlf":
        text = text.replace("\n", "\r\n")
    path = tmp_path / "tokenizer.json"
    path.write_bytes(text.encode())
    info = load_tokenizer(path)
    want = reference(text)[0]
    assert [info._entry(i) for i in sorted(want)] == [want[i] for i in sorted(want)]
    per_line = dump in ("hf indent 2", "spaced", "hf, crlf")
    assert (info._vocab is None) == per_line  # the shortcut held, or it gave way
    for i in (-1, len(want), len(want) + 7):  # past the vocabulary: None, as from the dict
        assert info._entry(i) is None
