"""``gti probe``: a thin typer command; register it with ``app.command("probe")(probe)``.

Its options are the fields of :class:`~gti.probe.config.ProbeConfig` (``geodiag.settings``).
"""

from __future__ import annotations

import typer

from geodiag.settings import options_from
from gti.errors import exits_on_bad_input
from gti.probe.config import ProbeConfig


@exits_on_bad_input
@options_from("cfg", ProbeConfig)
def probe(cfg: ProbeConfig = ProbeConfig()) -> None:
    """What the new rows say about their items, before SFT: text -> SID decoding
    constrained to the index's SIDs (exact match, accuracy per level) against the
    tie-break and most-frequent-code baselines, and SID -> text likelihood against
    shuffled SIDs, on held-out items, with 95% intervals.

    Reads any framework's SID map and item texts (--sids, --items), or the checkpoint's
    own. Prints a table, or JSON with --json; -o FILE and --write (probe.json beside the
    checkpoint, which `geodiag report` shows) keep the JSON.
    """
    from transformers.utils import logging as hf_logging

    from geodiag.jsonio import dumps
    from gti.probe.run import run_probe
    from gti.probe.text import probe_text

    hf_logging.disable_progress_bar()  # one small load; its bar would only split the output
    result = run_probe(cfg)
    typer.echo(dumps(result) if cfg.as_json else probe_text(result))
