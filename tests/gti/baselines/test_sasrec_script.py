"""scripts/sasrec_recbole.py on the synthetic split (slow: needs RecBole's own venv,
made by scripts/sasrec-venv.sh; point RECBOLE_PYTHON at its python)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gti.baselines.recbole_export import write_benchmark_files
from gti.baselines.run import load_split
from gti.evaluate.rankings import load_rankings

ROOT = Path(__file__).parents[3]


@pytest.mark.slow
def test_sasrec_ranks_every_leave_one_out_user(tmp_path):
    python = os.environ.get("RECBOLE_PYTHON", "/tmp/recbole-venv/bin/python")
    if not Path(python).is_file():
        pytest.skip("no RecBole venv: run scripts/sasrec-venv.sh or set RECBOLE_PYTHON")
    sd = load_split("synthetic", k_core_min=1, max_history=20)
    data = tmp_path / "data" / "syn"
    write_benchmark_files(sd.splits, data, "syn")
    out = tmp_path / "out"
    subprocess.run(
        [
            python,
            str(ROOT / "scripts" / "sasrec_recbole.py"),
            str(data),
            "syn",
            str(out),
            "--epochs",
            "1",
        ],
        check=True,
        timeout=600,
    )
    for split in ("valid", "test"):
        r = load_rankings(out / f"{split}.rankings.json")
        examples = getattr(sd.splits, split)
        assert r.users == sorted(e.user_id for e in examples)
        assert all(len(lst) == 20 for lst in r.ranked)
        assert r.source["model"] == "sasrec"
