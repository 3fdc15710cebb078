"""The prefix trie of the catalog's semantic IDs, as tensors.

A SID has one code per level; level ``d``'s codes are the contiguous token ids of
that level (``level_tokens[d]``). Nodes at depth ``d`` are the distinct prefixes of
length ``d`` (depth 0: the root; depth L: the items themselves). One table per
depth says where each (node, code) leads:

    children[d]: (n_nodes[d] + 1, K_d) long, the child at depth d + 1, or the
                 "dead" id n_nodes[d + 1] when no item has that prefix.

The extra last row is the dead node (every child dead), so beams that ran out of
valid continuations stay dead without branching. Decoding a step is then one
gather per beam: ``allowed = children[d][node] < n_nodes[d + 1]``. Only real items
can come out, unlike per-level allowed-token sets, which admit any combination.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from geodiag.io.vocabulary.sidecar import SemanticIds


@dataclass
class SidTrie:
    item_ids: list[str]  # leaf index -> item id
    codes: torch.Tensor  # (n_items, L) long
    level_tokens: list[torch.Tensor]  # per level: (K_d,) token ids in code order
    children: list[torch.Tensor]  # per depth d < L: (n_nodes[d] + 1, K_d) long
    node_of: list[torch.Tensor]  # per depth d <= L: (n_items,) the item's depth-d node
    prefix_codes: list[torch.Tensor]  # per depth d: (n_nodes[d], d) codes of each node
    n_nodes: list[int]  # per depth 0..L; n_nodes[L] = n_items

    @property
    def depth(self) -> int:
        return self.codes.shape[1]

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    def to(self, device: torch.device | str) -> SidTrie:
        move = lambda ts: [t.to(device) for t in ts]  # noqa: E731
        return SidTrie(
            self.item_ids,
            self.codes.to(device),
            move(self.level_tokens),
            move(self.children),
            move(self.node_of),
            move(self.prefix_codes),
            self.n_nodes,
        )

    def allowed(self, depth: int, nodes: torch.Tensor) -> torch.Tensor:
        """(..., K_depth) bool: which codes continue a real SID from ``nodes`` (...)."""
        return self.children[depth][nodes] < self.n_nodes[depth + 1]

    def item_tokens(self) -> torch.Tensor:
        """(n_items, L) token ids of every item's SID."""
        return torch.stack(
            [self.level_tokens[d][self.codes[:, d]] for d in range(self.depth)], dim=1
        )

    @classmethod
    def build(cls, sids: SemanticIds, items: list[str] | None = None) -> SidTrie:
        """The trie of ``items`` (default: every item of ``sids``)."""
        if not sids.has_token_ids:
            raise ValueError("the semantic IDs carry no token ids; pass a checkpoint's sidecar")
        items = list(sids.items) if items is None else items
        codes = np.array([sids.items[i] for i in items], dtype=np.int64).reshape(len(items), -1)
        if len({tuple(c) for c in codes.tolist()}) != len(items):
            raise ValueError("two items share a SID: decoding could not tell them apart")
        L = codes.shape[1]
        node_of, prefix_codes, n_nodes = [], [], []
        for d in range(L):
            prefixes, inverse = np.unique(codes[:, :d], axis=0, return_inverse=True)
            node_of.append(torch.from_numpy(inverse.reshape(-1).astype(np.int64)))
            prefix_codes.append(torch.from_numpy(prefixes.reshape(len(prefixes), d)))
            n_nodes.append(len(prefixes))
        node_of.append(torch.arange(len(items)))  # depth L: the item itself
        prefix_codes.append(torch.from_numpy(codes))
        n_nodes.append(len(items))
        children = []
        for d, level in enumerate(sids.levels):
            table = torch.full((n_nodes[d] + 1, level.size), n_nodes[d + 1], dtype=torch.long)
            table[node_of[d], torch.from_numpy(codes[:, d])] = node_of[d + 1]
            children.append(table)
        return cls(
            item_ids=items,
            codes=torch.from_numpy(codes),
            level_tokens=[torch.tensor(lv.token_ids, dtype=torch.long) for lv in sids.levels],
            children=children,
            node_of=node_of,
            prefix_codes=prefix_codes,
            n_nodes=n_nodes,
        )
