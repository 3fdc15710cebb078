"""geodiag.measure on transformers and PEFT models: the rows are those the model computes.

Reference: the modules themselves. The input rows are ``embedding(ids)``; the head's
rows are ``head(I_d).T`` (a linear head maps the identity to its weight's transpose),
so every PEFT variant is checked against what its forward pass uses, and the input
rows also against ``merge_and_unload()``.
"""

import copy
import warnings

import numpy as np
import pytest
from tiny_models import tiny_lm

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

import geodiag  # noqa: E402
from geodiag.api import open_source  # noqa: E402

VOCAB, DIM, N_NEW = 120, 16, 20
NEW = list(range(VOCAB - N_NEW, VOCAB))


def tiny(tie: bool = True, seed: int = 0):
    return tiny_lm(VOCAB, hidden_size=DIM, tied=tie, seed=seed)


def perturb(model, seed=1):
    """Move every trainable parameter, as training would (PEFT inits are no-ops)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.5)


def forward_rows(model):
    """(input rows, head rows) of the new tokens as the forward pass uses them, float64."""
    ids = torch.tensor(NEW)
    with torch.no_grad():
        x = model.get_input_embeddings()(ids).double().numpy()
        head = model.get_output_embeddings()
        h = head(torch.eye(DIM)).T[ids].double().numpy()
    return x, h


def rows_of(model):
    ckpt = open_source(model, new_ids=NEW)
    return [ckpt.read_rows(m, ckpt.new.ids) for m in ckpt.matrices], ckpt.tied


def test_plain_model_tied_and_untied():
    tied = tiny(tie=True)
    rep = geodiag.measure(tied, new_ids=NEW, n_permutations=10)
    assert [m.role for m in rep.matrices] == ["input"] and rep.tied
    w = tied.get_input_embeddings().weight
    assert geodiag.measure(w, new_ids=NEW, n_permutations=10).matrices[0].new == rep.matrices[0].new
    untied = tiny(tie=False)
    rep = geodiag.measure(untied, new_ids=NEW, n_permutations=10)
    assert [m.role for m in rep.matrices] == ["input", "output"] and not rep.tied
    (x, h), _ = rows_of(untied)
    fx, fh = forward_rows(untied)
    np.testing.assert_array_equal(x, fx)
    # head(I).T is a matmul by 1 and 0s: exact in float32, so exactly the weight rows.
    np.testing.assert_array_equal(h, fh)


PEFT_CONFIGS = {
    "trainable tokens": lambda: peft.TrainableTokensConfig(
        target_modules=["embed_tokens"], token_indices=NEW
    ),
    "lora + trainable tokens": lambda: peft.LoraConfig(
        r=4, target_modules=["q_proj"], trainable_token_indices={"embed_tokens": NEW}
    ),
    "modules_to_save": lambda: peft.LoraConfig(
        r=4, target_modules=["q_proj"], modules_to_save=["embed_tokens", "lm_head"]
    ),
    "lora on the embedding": lambda: peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=["embed_tokens", "q_proj"]
    ),
}


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("kind", list(PEFT_CONFIGS))
def test_peft_model_rows_are_the_effective_rows(kind, tie):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = peft.get_peft_model(tiny(tie), PEFT_CONFIGS[kind]())
    perturb(model)
    rows, tied = rows_of(model)
    fx, fh = forward_rows(model)
    # The input embedding is called as the model calls it: identical values.
    np.testing.assert_array_equal(rows[0], fx)
    if tied:
        np.testing.assert_array_equal(fx, fh)  # the head really uses the input rows
    else:
        # the head's weight rows against head(I): float32 sums of one product each,
        # plus LoRA's B @ A (r = 4 terms): a few float32 ulps.
        np.testing.assert_allclose(rows[1], fh, rtol=1e-5, atol=1e-6)
        assert not np.array_equal(fx, fh)
    rep = geodiag.measure(model, new_ids=NEW, n_permutations=10, neighbors=0)
    assert len(rep.matrices) == (1 if tied else 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        merged = copy.deepcopy(model).merge_and_unload()
    mx = merged.get_input_embeddings().weight[NEW].detach().double().numpy()
    # merging adds B @ A * scaling into the float32 weight: rounding of one addition.
    np.testing.assert_allclose(rows[0], mx, rtol=1e-6, atol=1e-7)


def test_peft_tied_expectations():
    """Which PEFT setups leave a tied model tied: the head must see the trained rows."""

    def tied_after(kind):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = peft.get_peft_model(tiny(True), PEFT_CONFIGS[kind]())
        perturb(model)
        return rows_of(model)[1]

    # trainable tokens tie the head's adapter to the embedding's
    assert tied_after("trainable tokens") and tied_after("lora + trainable tokens")
    # LoRA on the embedding changes the input rows only: the head still uses E
    assert not tied_after("lora on the embedding")


def test_a_model_and_its_tokenizer_say_which_rows_are_new(tmp_path):
    """tokenizer=: its added non-special tokens are the new rows, the CLI's rule for a
    folder (geodiag.io.vocabulary.new_tokens.from_tokenizer); the same rows as the saved folder's."""
    from tiny_models import save, word_tokenizer

    tok = word_tokenizer(100)
    tok.add_tokens(["<pad_sp>"], special_tokens=True)  # special: not a new row of the rule
    added = [f"<{lv}_{c}>" for lv in "ab" for c in range(10)]
    tok.add_tokens(added)
    model = tiny_lm(len(tok), hidden_size=DIM)
    ids = tok.convert_tokens_to_ids(added)
    ckpt = open_source(model, tokenizer=tok)
    assert ckpt.new.ids.tolist() == ids and ckpt.new.source == "tokenizer"
    by_tokenizer = geodiag.check(model, tokenizer=tok, n_permutations=10)
    by_ids = geodiag.check(model, new_ids=ids, n_permutations=10)
    # the same rows; the names also give the levels (<a_3>: level a), as from a folder
    rsa = [c for c in by_tokenizer.checks if c.name.startswith("rsa")]
    assert [c.name for c in rsa] == ["rsa[a]", "rsa[b]"]
    assert all("no codebooks given" in c.message for c in rsa)
    assert [(c.name, c.value) for c in by_tokenizer.checks if c not in rsa] == [
        (c.name, c.value) for c in by_ids.checks
    ]
    folder = save(model, tmp_path / "ckpt", tok)
    from_folder = geodiag.measure(folder, n_permutations=10).matrices[0]
    in_memory = geodiag.measure(model, tokenizer=tok, n_permutations=10).matrices[0]
    assert from_folder.n_new == len(ids) and from_folder.new == in_memory.new


def test_a_model_without_a_rule_for_its_new_rows_says_how():
    from tiny_models import word_tokenizer

    model = tiny_lm(VOCAB, hidden_size=DIM)
    from geodiag.errors import InputError

    with pytest.raises(InputError, match="pass tokenizer="):
        geodiag.check(model)
    with pytest.raises(InputError, match="no added non-special tokens"):
        geodiag.check(model, tokenizer=word_tokenizer(VOCAB - 1))
