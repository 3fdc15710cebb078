#!/bin/bash
# usage: launch.sh NAME args...   (runs ground.py in the background, 1 thread, passive OpenMP)
name=$1; shift
mkdir -p runs/probe/$name
OMP_WAIT_POLICY=PASSIVE nohup .venv/bin/python reports/grounding/probes/ground.py --sids runs/ml100k/sids --out runs/probe/$name "$@" > runs/probe/$name/stdout.txt 2>&1 &
echo $! > runs/probe/$name/pid
