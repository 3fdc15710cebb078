"""``gti evaluate``: a thin typer command; register it with ``app.command("evaluate")(evaluate)``.

Its options are the fields of :class:`~gti.evaluate.config.EvalConfig` (``geodiag.settings``).
"""

from __future__ import annotations

import json

import typer

from geodiag.settings import options_from
from gti.errors import exits_on_bad_input
from gti.evaluate.config import EvalConfig


@exits_on_bad_input
@options_from("cfg", EvalConfig)
def evaluate(cfg: EvalConfig = EvalConfig()) -> None:
    """Recall@K and NDCG@K on the leave-one-out validation and test users.

    Items come from beam search constrained to the catalog's SID prefix trie (only
    real items can come out), or with --exact from scoring every item. Prints the
    metrics as JSON.
    """
    from gti.evaluate.run import run_evaluate

    result = run_evaluate(cfg)
    summary = {s: {"n_users": r.n_users, **r.metrics} for s, r in result.splits.items()}
    typer.echo(json.dumps(summary, indent=1))
