"""A synthetic catalog with planted hierarchical categories (top -> sub -> item).

Each top category and each subcategory owns a pool of made-up words; an item's
text mixes words from its top pool, its subcategory pool and a shared noise
pool. Items of one top category therefore share vocabulary, subcategories share
more, and nothing else does: a content encoder that sees words (``bow``) recovers
the hierarchy, which is what the semantic-ID tests check. Fully offline and
seeded. Planted labels are in ``item.attributes["category"|"subcategory"]`` and
never in the text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gti.data.catalog import Dataset, Interaction, Item, build_catalog

NAME = "synthetic"
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


@dataclass
class SyntheticConfig:
    """Defaults: 4 x 4 x 12 = 192 items, enough for 3 levels of 8 codes in tests."""

    n_top: int = 4
    n_sub: int = 4  # subcategories per top category
    items_per_sub: int = 12
    top_pool: int = 10  # words owned by each top category
    sub_pool: int = 8  # words owned by each subcategory
    noise_pool: int = 200  # words shared by everything
    words_top: int = 5  # words per item drawn from each pool
    words_sub: int = 4
    words_noise: int = 4
    n_users: int = 60
    seed: int = 0


def _words(n: int, rng: np.random.Generator, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice(list(_CONSONANTS)) + rng.choice(list(_VOWELS)) for _ in range(3))
        if w not in taken:
            taken.add(w)
            out.append(w)
    return out


def make_synthetic(config: SyntheticConfig | None = None) -> Dataset:
    """Catalog with planted categories plus interactions biased to one top category per user."""
    cfg = config or SyntheticConfig()
    rng = np.random.default_rng(cfg.seed)
    taken: set[str] = set()
    noise = _words(cfg.noise_pool, rng, taken)
    items = []
    for t in range(cfg.n_top):
        top_words = _words(cfg.top_pool, rng, taken)
        for s in range(cfg.n_sub):
            sub_words = _words(cfg.sub_pool, rng, taken)
            for k in range(cfg.items_per_sub):
                words = list(rng.choice(top_words, cfg.words_top, replace=False))
                words += list(rng.choice(sub_words, cfg.words_sub, replace=False))
                words += list(rng.choice(noise, cfg.words_noise, replace=False))
                rng.shuffle(words)
                title = f"{words[0].capitalize()} {words[1]}"
                items.append(
                    Item(
                        item_id=f"t{t}s{s}i{k}",
                        title=title,
                        text=f"{title}. {' '.join(words[2:])}.",
                        attributes={"category": f"t{t}", "subcategory": f"t{t}.s{s}"},
                    )
                )
    catalog = build_catalog(items, NAME)
    return Dataset(NAME, catalog, _interactions(cfg, catalog.item_ids, rng), NAME)


def _interactions(
    cfg: SyntheticConfig, item_ids: list[str], rng: np.random.Generator
) -> list[Interaction]:
    """Each user favours one top category (80% of events), 6..14 events, increasing time."""
    per_top = cfg.n_sub * cfg.items_per_sub
    out = []
    for u in range(cfg.n_users):
        top = int(rng.integers(cfg.n_top))
        t = 1_000_000 + int(rng.integers(10_000))
        for _ in range(int(rng.integers(6, 15))):
            if rng.random() < 0.8:
                idx = top * per_top + int(rng.integers(per_top))
            else:
                idx = int(rng.integers(len(item_ids)))
            t += int(rng.integers(1, 5_000))
            out.append(Interaction(user_id=f"u{u}", item_id=item_ids[idx], timestamp=t))
    return out
