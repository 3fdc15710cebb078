"""``make demo``'s run folder, test-sized: the demo's three arms (mean, random and
gti-from-description), each ``gti init`` then ``gti sft``, written where ``gti experiment``
writes them (``OUT/seed-0/init/<init name>``, ``OUT/seed-0/sft/<arm>``: the folder names
come from gti.experiment, as the demo's do).

The tiny world's level a has 8 codes of which the items use 0-2: five dead codes, whose rows
the grounded arm leaves identical and at its init (no example reaches them), as the demo's
grounded arm leaves its 16. The SFT is short and at a low rate, as the demo's smoke SFT is.

Shared by tests/gti/sft/test_one_verdict.py (every route, one verdict), the README's code
blocks (tests/docs/test_code_blocks.py) and its recorded outputs
(tests/tools/test_readme_outputs.py). Imports torch: import it inside a test that skips
without torch.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import save_file
from sftworld import World, build_world
from tinyworld import make_sids

from geodiag.io.vocabulary.sidecar import Level, save
from gti.experiment.arms import ARMS
from gti.experiment.layout import experiment_paths
from gti.init.config import GroundingConfig, InitConfig
from gti.init.run import run_init
from gti.sft.config import SFTConfig
from gti.sft.run import run_sft

DEMO_ARMS = ("mean", "random", "gti-from-description")  # gti/presets/demo.toml's arms
SEED = 0
LEVEL_SIZES = (("a", 8), ("b", 3), ("c", 2))


def sids_dir(root: Path, world: World) -> Path:
    """``gti sids build``'s folder for the world, with level a widened to 8 codes."""
    side = make_sids(
        {"stage": "sids", "source_model": str(world.root / "model"), "data": world.data_spec}
    )
    side.levels = [Level(name, size) for name, size in LEVEL_SIZES]
    folder = root / "sids"
    folder.mkdir()
    save(side, folder / "semantic_ids.json")
    g = torch.Generator().manual_seed(1)
    books = {name: torch.randn(size, 5, generator=g) for name, size in LEVEL_SIZES}
    save_file(books, folder / "codebooks.safetensors")
    return folder


def build_demo(root: Path, out: Path | None = None) -> dict[str, Path]:
    """The six checkpoints, keyed as under ``OUT/seed-0`` (``init/mean``, ...,
    ``sft/gti-from-description``); the world and the SIDs under ``root``, the run in
    ``out`` (default ``root / "runs/demo"``)."""
    world = build_world(root / "world")
    sids = sids_dir(root, world)
    out = Path(out) if out is not None else root / "runs" / "demo"
    made: dict[str, Path] = {}
    for arm in DEMO_ARMS:
        spec, paths = ARMS[arm], experiment_paths(out, arm, SEED)
        key = f"init/{paths.init.name}"
        if key not in made:
            made[key] = run_init(
                InitConfig(
                    sids=sids,
                    out=paths.init,
                    strategy=spec.init,
                    start_from=spec.start_from,
                    seed=SEED,
                    grounding=GroundingConfig(steps=4, batch_size=4, progress=False),
                    device="cpu",
                )
            )
        made[f"sft/{arm}"] = run_sft(
            SFTConfig(
                init=paths.init,
                out=paths.sft,
                seed=SEED,
                tasks=spec.tasks,
                steps=2,  # short, at a low rate: rows no example reaches barely move
                batch_size=4,
                micro_batch_size=4,
                lr=1e-4,
                warmup_steps=1,
                k_core=1,
                max_history=3,
                save_every=100,
                progress=False,
                device="cpu",
            )
        )
    return made


def build_demo_isolated(root: Path, cache: Path, out: Path | None = None) -> dict[str, Path]:
    """:func:`build_demo` with gti's cache at ``cache`` (not the user's) and one torch
    thread (tiny models: faster on a busy CPU); both restored afterwards."""
    old_cache, threads = os.environ.get("GTI_CACHE"), torch.get_num_threads()
    os.environ["GTI_CACHE"] = str(cache)
    torch.set_num_threads(1)
    try:
        return build_demo(root, out=out)
    finally:
        torch.set_num_threads(threads)
        if old_cache is None:
            os.environ.pop("GTI_CACHE")
        else:
            os.environ["GTI_CACHE"] = old_cache
