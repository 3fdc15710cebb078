"""The drop-in route over an OpenOneRec-style parquet pair (``*_codes.parquet`` +
``pid2caption.parquet``, codebooks in ``model.pt``): tokens spelled ``<s_a_12>`` as its
vocabulary spells them, grounded, kept by the continuation, read by ``geodiag check``."""

from __future__ import annotations

import numpy as np
import pytest
from lcrec_world import write_openonerec
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from geodiag.cli import app as geodiag_app
from gti.dropin.run import run_dropin
from gti.init.config import GroundingConfig, InitConfig

pytest.importorskip("pyarrow")


def test_an_openonerec_parquet_pair_grounds_its_own_tokens(lcrec, lcrec_model, tmp_path):
    world = write_openonerec(tmp_path / "openonerec", lcrec)
    g = GroundingConfig(steps=4, batch_size=4, lr=1e-2, progress=False)
    cfg = InitConfig(
        out=tmp_path / "out",
        sids=world.codes_file,
        items=world.captions,
        codebooks=world.codebooks,
        model=str(lcrec_model),
        strategy="gti",
        grounding=g,
        holdout=8,
    )
    out = run_dropin(cfg)
    tokens = sorted({t for toks in world.token_map(lcrec.codes).values() for t in toks})
    assert tokens[0].startswith("<s_a_")

    # OpenOneRec's own continuation: its tokenizer already carries the SID tokens.
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.add_tokens(tokens) == 0
    model = AutoModelForCausalLM.from_pretrained(out)
    model.resize_token_embeddings(len(tokenizer))
    ids = tokenizer.convert_tokens_to_ids(tokens)
    saved = load_file(out / "model.safetensors")["model.embed_tokens.weight"][ids]
    assert np.array_equal(model.get_input_embeddings().weight.detach().numpy()[ids], saved)

    gate = CliRunner().invoke(
        geodiag_app,
        ["check", str(out), "--sids", str(world.codes_file), "--codebooks", str(world.codebooks)],
    )
    assert gate.exit_code in (0, 1), gate.output
    # every level of their index measured against their codebooks (named rsa[LEVEL])
    assert all(f"rsa[{lv}]" in gate.output for lv in "abcd"), gate.output
    assert "Not measured" not in gate.output
