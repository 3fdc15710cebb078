"""The structure curve: how much of the codebook's structure the new rows carry,
measured on the in-memory rows while grounding runs.

Two kinds of figures, both on the live ``NewRows`` (no checkpoint written):

- geometry, with geodiag's own pure functions: the gate's figures (centered
  effective-rank ratio, spread relative to a seeded sample of original rows,
  mean pairwise cosine) over all new rows, and Spearman RSA per level on all of
  that level's rows against its codebook. The codebooks are only read here: they
  never enter init or grounding.
- grounding itself: with the backbone frozen, for a fixed seeded sample of items,
  the prompt of a held-out text -> SID template (never used in training) is run once;
  the level-a code is read off the last hidden state restricted to level a's rows,
  and the full SID greedily (each position restricted to that level's rows, the
  predicted token fed back). Chance is the accuracy of always answering the most
  frequent answer in the sample (its share): for level a the share of its most
  frequent code, for the full SID the share of the most frequent SID (1 / sample
  size when SIDs are unique).

The prompts hold no new token, so their key/value cache is computed once and only
the two greedy continuation steps run per measurement.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from geodiag.analysis.options import AnalyzeOptions
from geodiag.analysis.rows import reference_sample
from geodiag.metrics.geometry import summarize
from geodiag.metrics.rsa import rsa
from geodiag.settings import default_of
from gti.init.grounding import NewRows, SharedPrefix
from gti.models.kv_cache import cache_kwarg, cache_of
from gti.prompts import render

# Never in TEXT_TO_SID: the probe asks in words the rows were not trained on.
HELD_OUT_TEXT_TO_SID = "Find the semantic ID tokens for this catalog entry: {text}"


@dataclass(frozen=True)
class ProbeItems:
    """What the probe needs to know about the catalog, in item order."""

    texts: list[str]
    codes: np.ndarray  # (n_items, n_levels) int
    level_names: list[str]
    level_sizes: list[int]
    codebooks: dict[str, np.ndarray]  # level name -> (size, code_dim), code order


def reference_rows(embedding: torch.Tensor, base_vocab_size: int, n: int, seed: int) -> np.ndarray:
    """The seeded sample of original rows geodiag compares ``n`` new rows with (its draw,
    ``geodiag.analysis.rows.reference_sample``, at its default cap), zero and non-finite
    rows left out as geodiag does."""
    ids = reference_sample(base_vocab_size, n, seed, AnalyzeOptions.reference_cap)
    rows = embedding.detach()[torch.from_numpy(ids)].double().cpu().numpy()
    ok = np.isfinite(rows).all(axis=1) & np.any(rows != 0, axis=1)
    return rows[ok]


def _common_prefix(prompts: list[list[int]]) -> list[int]:
    """Longest prefix of every prompt, one token short of the shortest prompt."""
    n = 0
    while n + 1 < min(len(p) for p in prompts) and len({p[n] for p in prompts}) == 1:
        n += 1
    return prompts[0][:n]


class StructureProbe:
    """Measures ``rows`` against the codebooks and the held-out text -> SID task."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        rows: NewRows,
        items: ProbeItems,
        *,
        base_vocab_size: int,
        permutations: int = 200,
        n_probe_items: int = 256,
        seed: int = 0,
        chunk: int = 64,
    ) -> None:
        t0 = time.perf_counter()
        self.model, self.rows, self.items = model, rows, items
        self.permutations, self.seed = permutations, seed
        n_new = int(rows.ids.numel())
        self.reference = reference_rows(
            model.get_input_embeddings().weight, base_vocab_size, n_new, seed
        )
        self.offsets = np.cumsum([0, *items.level_sizes])  # row range of each level
        n_items = len(items.texts)
        rng = np.random.default_rng(seed)
        self.sample = np.sort(rng.choice(n_items, size=min(n_probe_items, n_items), replace=False))
        codes = items.codes[self.sample]  # (n, L)
        self.targets = torch.from_numpy(codes).long()
        _, counts_a = np.unique(codes[:, 0], return_counts=True)
        _, counts_sid = np.unique(codes, axis=0, return_counts=True)
        self.chance = {"a": counts_a.max() / len(codes), "sid": counts_sid.max() / len(codes)}
        prompts = [self._prompt(tokenizer, items.texts[i]) for i in self.sample]
        common = _common_prefix(prompts)
        self.shared = SharedPrefix(model, common) if common else None
        # Chunks of similar length waste little on padding.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        self._chunks = [order[s : s + chunk] for s in range(0, len(order), chunk)]
        self.prompts = prompts  # token ids, sample order
        self._encoded = [self._encode([prompts[i] for i in c]) for c in self._chunks]
        self._order = torch.tensor([i for c in self._chunks for i in c])
        self.setup_s = time.perf_counter() - t0

    @staticmethod
    def _prompt(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
        ex = render(tokenizer, HELD_OUT_TEXT_TO_SID.format(text=text), "x", direction=0)
        return list(ex.input_ids[: ex.answer_start])

    @torch.no_grad()
    def _encode(self, prompts: list[list[int]]) -> dict[str, object]:
        """Prompts through the frozen decoder, after the shared prefix's cache and
        left-padded behind it: last hidden state and cache."""
        device = self.rows.ids.device
        decoder = self.model.get_decoder()
        C = len(self.shared) if self.shared is not None else 0
        rest = [p[C:] for p in prompts]
        T = max(len(p) for p in rest)
        ids = torch.zeros(len(rest), T, dtype=torch.long, device=device)
        mask = torch.zeros(len(rest), T, dtype=torch.bool, device=device)
        for i, p in enumerate(rest):
            ids[i, T - len(p) :] = torch.tensor(p, device=device)
            mask[i, T - len(p) :] = True
        pos = C + (mask.long().cumsum(1) - 1).clamp(min=0)  # (B, T)
        mask = torch.cat([torch.ones(len(rest), C, dtype=torch.bool, device=device), mask], 1)
        out = decoder(
            input_ids=ids,
            attention_mask=mask,  # (B, C + T)
            position_ids=pos,
            use_cache=True,
            **({cache_kwarg(decoder): self.shared.cache_for(len(rest))} if C else {}),
        )
        return {
            "h": out.last_hidden_state[:, -1],  # (B, d)
            "cache": cache_of(out),
            "mask": mask,
            "next_pos": pos[:, -1] + 1,  # (B,) position of the first answer token
        }

    def _level_rows(self, matrix: torch.Tensor, level: int) -> torch.Tensor:
        return matrix[int(self.offsets[level]) : int(self.offsets[level + 1])]

    @torch.no_grad()
    def predict(self) -> np.ndarray:
        """Greedy codes (n_probe_items, n_levels) in sample order, each level
        restricted to its own rows."""
        decoder = self.model.get_decoder()
        out_rows = self.rows.output_rows.detach()
        n_levels = len(self.items.level_names)
        preds = []
        for c in self._encoded:
            h, cache, mask, pos = c["h"], c["cache"], c["mask"], c["next_pos"]
            chunk_preds = []
            for level in range(n_levels):
                logits = h.to(out_rows.dtype) @ self._level_rows(out_rows, level).T  # (B, K)
                code = logits.argmax(1)  # (B,)
                chunk_preds.append(code)
                if level + 1 == n_levels:
                    break
                slot = code + int(self.offsets[level])
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                emb = self.rows.inp.detach()[slot][:, None]  # (B, 1, d)
                if self.rows.embed_scale is not None:
                    emb = emb * self.rows.embed_scale
                h = decoder(
                    inputs_embeds=emb,
                    attention_mask=mask,
                    position_ids=(pos + level)[:, None],
                    use_cache=True,
                    **{cache_kwarg(decoder): cache},
                ).last_hidden_state[:, -1]
            # Back to the prompt alone for the next measurement (negative: tokens to drop).
            cache.crop(-(n_levels - 1))
            preds.append(torch.stack(chunk_preds, 1).cpu())
        pred = torch.empty(len(self._order), n_levels, dtype=torch.long)
        pred[self._order] = torch.cat(preds)  # (n, L), sample order
        return pred.numpy()

    def accuracy(self) -> dict[str, float]:
        """Level-a and full-SID accuracy from text under the held-out template."""
        pred, t = self.predict(), self.targets.numpy()
        return {"a": float((pred[:, 0] == t[:, 0]).mean()), "sid": float((pred == t).all(1).mean())}

    def measure(self) -> dict[str, object]:
        """The ``structure`` record of one train_log line (see module docstring)."""
        x = self.rows.inp.detach().double().cpu().numpy()  # (n_new, d)
        g = summarize(x, self.reference)
        r, p = {}, {}
        for li, name in enumerate(self.items.level_names):
            res = rsa(
                x[int(self.offsets[li]) : int(self.offsets[li + 1])],
                self.items.codebooks[name],
                n_permutations=self.permutations,
                seed=self.seed,
                max_items=default_of(AnalyzeOptions, "rsa_max_items"),  # geodiag's sample
            )
            r[name], p[name] = _plain(res.spearman), _plain(res.p_value)
        # Plain floats: the log is JSON and part of the resume state (weights_only load).
        return {
            "effective_rank_ratio": _plain(g.centered.effective_rank_ratio),
            "spread_relative": _plain(g.spread_relative),
            "mean_pairwise_cosine": _plain(g.mean_pairwise_cosine),
            "rsa": r,
            "rsa_p": p,
            "rsa_permutations": self.permutations,
            "code_accuracy": self.accuracy(),
            "code_accuracy_chance": {k: float(v) for k, v in self.chance.items()},
            "probe_items": len(self.sample),
        }


def _plain(x: float | None) -> float | None:
    return None if x is None else float(x)


def structure_entry(step: int, elapsed_s: float, probe: StructureProbe) -> dict[str, object]:
    """One train_log line: ``{"step", "elapsed_s", "measure_s", "structure"}``.

    ``elapsed_s`` is training time so far (measurements excluded); ``measure_s`` is
    what this measurement cost.
    """
    t0 = time.perf_counter()
    structure = probe.measure()
    return {
        "step": step,
        "elapsed_s": round(elapsed_s, 3),
        "measure_s": round(time.perf_counter() - t0, 3),
        "structure": structure,
    }
