"""Config of ``gti probe``. Import-light (no torch) so ``gti --help`` stays fast."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geodiag.settings import REQUIRED, check_bounds, same_as, setting
from gti.evaluate.stats import DEFAULT_RESAMPLES
from gti.init.config import DROPIN_HOLDOUT, InitConfig
from gti.options import cache_dir_setting, check_device, check_dtype, dtype_setting


@dataclass
class ProbeConfig:
    """The Stage-1 probe of one checkpoint: text -> SID decoding constrained to the index's
    SIDs and SID -> text likelihood against shuffled pairs, on held-out items, beside the
    baselines of decoders that read no text."""

    checkpoint: Path = setting(
        Path("runs/ml100k/gti/init"),
        help="Checkpoint folder (`gti init`, `gti sft`, or any model with the index's tokens).",
        argument=True,
        cli_default=REQUIRED,
    )
    # None: the checkpoint's own (gti's semantic_ids.json, or the drop-in's recorded index).
    sids: Path | None = setting(
        None,
        help="A framework's SID map (LC-Rec/MiniOneRec index.json, ...; default: the "
        "checkpoint's own SIDs).",
    )
    items: Path | None = setting(
        None,
        help="Item texts of --sids (LC-Rec item.json, pid2caption.parquet, JSON lines; "
        "default: the checkpoint's own item texts).",
    )
    text_fields: str | None = same_as(InitConfig, "text_fields")
    sid_offset: int | None = same_as(InitConfig, "sid_offset")
    data: str | None = setting(
        None,
        help="Dataset of a gti checkpoint's item texts (default: the one its SIDs were built from).",
    )
    # As many as the drop-in route holds out, when the checkpoint records no held-out set.
    sample: int = setting(
        DROPIN_HOLDOUT,
        help="Items probed when the checkpoint records no held-out set (a seeded sample).",
        ge=2,
    )
    seed: int = setting(0, help="Seed of that sample, of the SID shuffle and of the bootstrap.")
    out: Path | None = setting(
        None, help="Write the probe's JSON to this file.", flags=("-o", "--out")
    )
    write: bool = setting(
        False,
        help="Write probe.json beside the checkpoint (`geodiag report` shows it).",
        flags=("--write",),
    )
    as_json: bool = setting(False, help="Print JSON instead of the table.", flags=("--json",))
    batch_size: int = setting(8, help="Sequences per forward pass of the likelihoods.", ge=1)
    n_resamples: int = setting(
        DEFAULT_RESAMPLES, help="Bootstrap resamples of the paired difference.", ge=1
    )
    device: str = setting("auto", help="auto | cpu | cuda[:N].")
    dtype: str = dtype_setting()
    cache_dir: Path | None = cache_dir_setting()

    def validate(self) -> None:
        check_bounds(self)
        check_dtype(self.dtype)
        check_device(self.device)
