#!/usr/bin/env bash
# A throwaway venv in which RecBole 1.2.1's SASRec runs (see scripts/sasrec_recbole.py for
# why it cannot share the project's .venv), then SASRec on the study's split.
#   scripts/sasrec-venv.sh [OUT=reports/ml100k-study/baselines/sasrec] [VENV=/tmp/recbole-venv]
set -euo pipefail
OUT=${1:-reports/ml100k-study/baselines/sasrec}
VENV=${2:-/tmp/recbole-venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.13.0
  "$VENV/bin/pip" install -q recbole==1.2.1
  "$VENV/bin/pip" install -q numpy==1.26.4 "pandas<2.3" "scipy<1.14" "setuptools<81"
fi
DATA=$(mktemp -d)/ml100k-loo
.venv/bin/gti baselines --data movielens-100k --export-recbole "$DATA" -o "$(dirname "$OUT")"
WORK=$(mktemp -d)
nice -n 10 "$VENV/bin/python" scripts/sasrec_recbole.py "$DATA" ml100k-loo "$WORK" --epochs 40 --patience 5
mkdir -p "$OUT"
cp "$WORK/valid.rankings.json" "$WORK/test.rankings.json" "$OUT/"
.venv/bin/gti baselines -o "$(dirname "$OUT")" --summarize "$OUT"
