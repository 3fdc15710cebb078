"""The naive grounding route: the reference the fast route (gti.init.grounding) is
checked against in tests/gti/init and timed against in bench/grounding.py. Not shipped:
it lives beside the bench, the tests put bench/ on their path.

The whole embedding matrix (and an untied head) is a trainable parameter; a
gradient hook zeroes the original rows' gradients, so only the new rows move.
Every step runs the full model forward and backward over every position, with
``labels = -100`` outside the answer, and AdamW keeps state for all V rows.
Same loss, same gradient on the new rows (``tests/gti/init``); much more work.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from gti.init.grounding import freeze
from gti.init.pairs import Batch
from gti.vocab import VocabExtension


def make_naive_trainable(model: PreTrainedModel, ext: VocabExtension) -> list[torch.nn.Parameter]:
    """Freeze the model, then make the embedding (and untied head) trainable behind a
    mask that keeps the original rows' gradient at zero. Returns those parameters."""
    freeze(model)
    params = [model.get_input_embeddings().weight]
    if not ext.tied:
        params.append(model.get_output_embeddings().weight)
    for w in params:
        keep = torch.zeros(w.shape[0], 1, dtype=w.dtype, device=w.device)  # (V, 1)
        keep[ext.ids_tensor(w.device)] = 1
        w.requires_grad_(True)
        w.register_hook(lambda grad, keep=keep: grad * keep)
    return params


def naive_loss(model: PreTrainedModel, batch: Batch) -> torch.Tensor:
    """Mean cross-entropy over the answer tokens, from the model's full forward (LM head
    over every position). The cross-entropy is computed here rather than by the model's
    own ``labels=`` loss, which casts logits to float32: a float64 model stays float64."""
    device = model.get_input_embeddings().weight.device
    ids = batch.input_ids.to(device)
    logits = model(input_ids=ids, attention_mask=batch.attention_mask.to(device)).logits
    predicts = batch.answer_mask.to(device)[:, 1:]  # (B, T-1): token t predicted at t - 1
    answer_logits = logits[:, :-1][predicts]  # (N, V)
    if answer_logits.dtype in (torch.float16, torch.bfloat16):  # CE in at least float32
        answer_logits = answer_logits.float()
    return F.cross_entropy(answer_logits, ids[:, 1:][predicts])
