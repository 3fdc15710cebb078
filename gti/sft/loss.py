"""The SFT loss as a module, so that DDP (or FSDP) wraps the whole computation.

Cross-entropy on the answer tokens only, summed: the trainer divides by the
number of answer tokens in the *global* batch, which makes one process and N
processes (or N accumulation steps) compute the same gradient. Only the answer
positions are projected onto the vocabulary: an LM head over every prompt
position would cost (B x T x V) for the few tokens that carry loss.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel


class AnswerLoss(nn.Module):
    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, answer_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed loss over the answer tokens, (N,) detached per-token losses).

        input_ids, attention_mask: (B, T), right-padded; answer_mask: (B, T) bool.
        """
        hidden = self.model.get_decoder()(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False
        ).last_hidden_state  # (B, T, d)
        # The token at t is predicted by the hidden state at t - 1.
        predicts = answer_mask[:, 1:]  # (B, T-1)
        h = hidden[:, :-1][predicts]  # (N, d)
        logits = self.model.get_output_embeddings()(h)  # (N, V)
        if logits.dtype in (torch.float16, torch.bfloat16):  # CE in at least float32
            logits = logits.float()
        token_losses = F.cross_entropy(logits, input_ids[:, 1:][predicts], reduction="none")
        return token_losses.sum(), token_losses.detach()
