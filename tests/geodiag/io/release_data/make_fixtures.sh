#!/usr/bin/env bash
# Write release_data/deepspeed/<version>/ for each DeepSpeed release below, then
# release_data/hf/<transformers>_<peft>/ for each pair, in a venv outside the repository
# (VENVS, default ../releases-venvs beside the worktree).
#
#   bash tests/geodiag/io/release_data/make_fixtures.sh [DEEPSPEED_VERSION ...]
#
# torch is pinned to the project's CPU build (2.13.0; never a CUDA wheel); DeepSpeed's sdist
# is built against it as the Makefile builds the pinned one (no build isolation, no ops).
# One venv serves every release: each is installed over the last, then run.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENVS="${VENVS:-$(cd "$HERE/../../../../.." && pwd)/releases-venvs}"
RELEASES=("$@")
[ ${#RELEASES[@]} -gt 0 ] || RELEASES=(0.14.5 0.16.9 0.18.9)
HF_PAIRS=(4.46.3:0.14.0 4.57.6:0.17.1 5.24.0:0.21.2)  # transformers:peft
PY="$VENVS/ds/bin/python"
if [ ! -x "$PY" ]; then
    python3 -m venv "$VENVS/ds"
    "$PY" -m pip install -q --upgrade pip
    "$PY" -m pip install -q torch==2.13.0 numpy safetensors
fi
for version in "${RELEASES[@]}"; do
    DS_BUILD_OPS=0 "$PY" -m pip install -q --no-build-isolation "deepspeed==$version"
    out="$HERE/deepspeed/$version"
    rm -rf "$out"
    DS_ACCELERATOR=cpu "$PY" "$HERE/write_deepspeed.py" "$out"
done
[ $# -gt 0 ] && exit 0  # DeepSpeed releases named: those only
# Installed over the same venv (torch already there: pip's plan pulls no torch).
for pair in "${HF_PAIRS[@]}"; do
    "$PY" -m pip install -q "transformers==${pair%%:*}" "peft==${pair##*:}"
    out="$HERE/hf/${pair%%:*}_${pair##*:}"
    rm -rf "$out"
    "$PY" "$HERE/write_hf.py" "$out"
done
