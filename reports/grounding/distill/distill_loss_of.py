"""Distillation loss (hidden: MSE after the final norm; logits: KL over the original
vocabulary) of each checkpoint's new rows on one fixed seeded batch of 64 items in
context, and of the mean start rows (the first checkpoint's model with every new row at
the original rows' mean), so that the objectives can be compared on distillation's own
figure. Research script: ``python distill_loss_of.py CKPT [CKPT ...]``."""

from __future__ import annotations

import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from geodiag.io.vocabulary.sidecar import load
from gti.data.sources import load_dataset
from gti.init.distill import DistillStream, distill_loss
from gti.init.grounding import NewRows, SharedPrefix, freeze
from gti.prompts import sid_strings
from gti.vocab import VocabExtension, is_tied

TARGETS = ("hidden", "logits")


def losses(model, rows, batch, shared) -> dict[str, float]:
    with torch.no_grad():
        return {
            t: float(distill_loss(model, rows, batch, target=t, shared=shared).loss)
            for t in TARGETS
        }


def main(ckpts: list[str]) -> dict[str, dict[str, float]]:
    out = {}
    for k, ckpt in enumerate(ckpts):
        sids = load(ckpt)
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(ckpt)
        ids = tuple(t for lv in sids.levels for t in lv.token_ids)
        freeze(model)
        rows = NewRows(model, VocabExtension(sids.base_vocab_size, ids, is_tied(model)))
        items = list(sids.items)
        catalog = load_dataset(str(sids.provenance["data"]), None).catalog
        texts = [catalog.items[catalog.index(i)].text for i in items]
        codes = sid_strings(sids, items)
        stream = DistillStream(tok, texts, codes, rows.slot, batch_size=64, seed=123)
        batch = stream.batch(0)
        prefix = stream.common_prefix()
        shared = SharedPrefix(model, prefix) if prefix else None
        out[ckpt] = losses(model, rows, batch, shared)
        print(ckpt, out[ckpt], flush=True)
        if k == 0:
            old = model.get_input_embeddings().weight.detach()[: sids.base_vocab_size]
            with torch.no_grad():
                rows.inp[:] = old.double().mean(0).float()
            out["mean (start)"] = losses(model, rows, batch, shared)
            print("mean (start)", out["mean (start)"], flush=True)
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=1))
