#!/bin/bash
# Grounding objectives compared at one step budget: `gti init --strategy gti` with
# --objective ce, distill and ce+distill, everything else equal (the cpu preset's AdamW
# from the mean; steps, batch and lr below), on SmolLM2-135M with the MovieLens-100k SIDs
# of `gti sids build` (defaults). Then each result's distillation loss on one fixed
# batch (distill_loss_of.py). Run from the repository root:
#   bash reports/grounding/distill/run.sh OUT STEPS BATCH EVERY
# As run (2026-12-06): OUT=/tmp/distill-meas, with 12 16 6 and 48 16 12 (the outputs then
# named ce, distill, ce-distill and b48-*; their logs are s12-* and s48-* here).
set -e
out=${1:-/tmp/distill-meas}; steps=${2:-12}; batch=${3:-16}; every=${4:-6}
[ -d "$out/sids" ] || python -m gti.cli sids build --data movielens-100k --model smollm2-135m -o "$out/sids"
names=()
for obj in ce distill ce+distill; do
  name=s${steps}-${obj/+/-}
  python -m gti.cli init --sids "$out/sids" -o "$out/$name" --strategy gti --preset cpu \
    --steps "$steps" --batch-size "$batch" --lr 1e-2 --structure-every "$every" \
    --probe-items 128 --structure-permutations 100 --objective "$obj" --no-progress --device cpu
  names+=("$out/$name")
done
python reports/grounding/distill/distill_loss_of.py "${names[@]}"
