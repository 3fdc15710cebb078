"""scripts/gpu-study.sh on a machine without CUDA stops at its preflight, with one line
saying why, and runs nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[3]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this checks the no-GPU path")
def test_gpu_script_refuses_a_machine_without_cuda(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "BUDGET_S": "5"}
    res = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-study.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1
    assert "gpu-study: torch sees no CUDA device" in res.stderr
    assert not (ROOT / "reports" / "ml100k-study-gpu" / "runs").exists()
