"""Model FLOPs utilisation: FLOPs counted from the model's shape and the tokens a step
processes, against a matrix-multiply peak measured on the same machine in the same run.

Counting (multiply-add = 2 FLOPs), for a Llama-style decoder with L layers, width d,
MLP width f, q heads x head dim = d, kv width d_kv, vocabulary V:

- forward, per token through the decoder: 2 * P_block * L with
  P_block = d * (d + 2 d_kv) + d * d + 3 * d * f (q, k, v, o and the gated MLP), plus
  attention 4 * d * ctx per layer (scores and weighted values over ``ctx`` keys);
- LM head: 2 * d * V_cols per position that is projected;
- backward: weight gradients double the matmul work (2x forward: activation and weight
  gradients), but where no weight trains (grounding) only activation gradients flow:
  1x forward.

The peak is ``torch.matmul`` of two n x n matrices (2 n^3 FLOPs per product), best of
a few repeats, in the same dtype and thread count as the step measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Shape:
    layers: int
    d: int
    ffn: int
    d_kv: int
    vocab: int

    @classmethod
    def of(cls, model: torch.nn.Module) -> Shape:
        c = model.config
        d = c.hidden_size
        d_kv = d // c.num_attention_heads * c.num_key_value_heads
        return cls(c.num_hidden_layers, d, c.intermediate_size, d_kv, c.vocab_size)

    @property
    def block_params(self) -> int:
        """Matmul weights of one decoder layer."""
        return self.d * (self.d + 2 * self.d_kv) + self.d * self.d + 3 * self.d * self.ffn

    def forward_flops(self, tokens: float, mean_ctx: float) -> float:
        """Decoder forward over ``tokens`` tokens attending to ``mean_ctx`` keys each."""
        per_token = self.layers * (2 * self.block_params + 4 * self.d * mean_ctx)
        return tokens * per_token

    def head_flops(self, positions: float, columns: int | None = None) -> float:
        return 2.0 * self.d * (self.vocab if columns is None else columns) * positions


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """Best FLOP/s of an n x n @ n x n ``torch.matmul`` in ``dtype``."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(dtype)
    b = torch.randn(n, n, generator=g).to(dtype)
    torch.matmul(a, b)  # warm-up: allocation, kernel selection
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best


def bf16_supported() -> bool:
    """Whether bfloat16 matmuls run natively here (CPU flag avx512_bf16 or amx_bf16)."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags
