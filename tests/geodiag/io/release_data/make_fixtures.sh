#!/usr/bin/env bash
# Write release_data/deepspeed/<version>/ for each DeepSpeed release below, each in a venv
# outside the repository (VENVS, default ../releases-venvs beside the worktree).
#
#   bash tests/geodiag/io/release_data/make_fixtures.sh [VERSION ...]
#
# torch is pinned to the project's CPU build (2.13.0; never a CUDA wheel); DeepSpeed's sdist
# is built against it as the Makefile builds the pinned one (no build isolation, no ops).
# One venv serves every release: each is installed over the last, then run.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENVS="${VENVS:-$(cd "$HERE/../../../../.." && pwd)/releases-venvs}"
RELEASES=("$@")
[ ${#RELEASES[@]} -gt 0 ] || RELEASES=(0.14.5 0.16.9 0.18.9)
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
