"""The next-item task's data for one catalog and its semantic IDs: leave-one-out
sequences and, per item, its SID string, text, title and SID token ids. Read by SFT
(training examples) and by evaluation (prompts and targets)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geodiag.errors import InputError
from geodiag.io.vocabulary.sidecar import SemanticIds
from gti.data.sequences import Example, Splits, k_core, leave_one_out
from gti.data.sources import load_dataset
from gti.prompts import item_token_ids, sid_strings


@dataclass
class TaskData:
    """Everything the next-item task reads, for one catalog and its SIDs."""

    splits: Splits
    sid_of: dict[str, str]  # item id -> "<a_1><b_2><c_3>"
    text_of: dict[str, str]  # item id -> rendered catalog text
    title_of: dict[str, str]  # item id -> title ("" when the catalog has none)
    tokens_of: dict[str, tuple[int, ...]]  # item id -> SID token ids


def load_task_data(
    sids: SemanticIds,
    data: str,
    *,
    k_core_min: int,
    max_history: int,
    cache_dir: Path | None = None,
) -> TaskData:
    """Load ``data``, check it against the SIDs and cut it into leave-one-out splits."""
    dataset = load_dataset(data, cache_dir)
    catalog = dataset.catalog
    missing = [i for i in catalog.item_ids if i not in sids.items]
    if missing:
        raise InputError(
            "--data",
            f"{len(missing)} item(s) of {data!r} have no semantic ID (e.g. {missing[0]!r}); "
            "use the dataset the SIDs were built from",
        )
    splits = leave_one_out(k_core(dataset.interactions, k_core_min), max_history)
    if not splits.train or not splits.test:
        raise InputError(
            "--k-core",
            f"no training or test sequences left in {data!r} after {k_core_min}-core filtering; "
            "lower --k-core",
        )
    items = list(sids.items)
    by_id = {it.item_id: it for it in catalog.items}
    return TaskData(
        splits=splits,
        sid_of=dict(zip(items, sid_strings(sids, items), strict=True)),
        text_of={i: by_id[i].text for i in items if i in by_id},
        title_of={i: by_id[i].title for i in items if i in by_id},
        tokens_of=item_token_ids(sids),
    )


def dataset_of(sids: SemanticIds, given: str | None, where: object) -> str:
    """The dataset of a stage's run, one rule for every stage: ``given`` (its ``--data``,
    or the TOML's ``data``), else the dataset ``sids`` were built from (their provenance);
    with neither, bad input naming ``--data``."""
    data = given or str(sids.provenance.get("data") or "")
    if not data:
        raise InputError("--data", f"{where} does not record its dataset; pass --data")
    return data


def of_users(examples: list[Example], users: set[str] | None) -> list[Example]:
    """The examples of ``users`` (None: all), in split order."""
    return examples if users is None else [e for e in examples if e.user_id in users]


def sample_users(task: TaskData, max_users: int | None, seed: int) -> set[str] | None:
    """A seeded sample of ``max_users`` users, drawn from the validation and test users
    together, so every arm, seed and choice of splits gets the same users; None: all."""
    import numpy as np

    if max_users is None:
        return None
    everyone = sorted(
        {e.user_id for e in task.splits.test} | {e.user_id for e in task.splits.valid}
    )
    if max_users >= len(everyone):
        return None
    rng = np.random.default_rng(seed)
    return set(rng.choice(everyone, max_users, replace=False).tolist())
