#!/usr/bin/env bash
# Run on the GPU machine from the project root, after installing .whl/ (see README):
#   bash benchmarks/run_gpu.sh [tests] [bench] [peers] [gpt STEPS]
# Logs go to $OUT (or benchmarks/out/).
set -u
out=${OUT:-benchmarks/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
date -u +%Y-%m-%dT%H:%MZ >> "$out/gpu.txt"
git rev-parse --short HEAD >> "$out/gpu.txt" 2>/dev/null
while [ $# -gt 0 ]; do
  case "$1" in
    tests) timeout 300 python3 -m pytest -m cuda -q -p no:cacheprovider -x 2>&1 \
             | tail -40 | tee "$out/cuda_tests.log" ;;
    bench) timeout 400 python3 benchmarks/bench_gpu.py W3 W4 W5 W1 W2 2>&1 | tee "$out/bench.log" ;;
    peers) timeout 400 python3 benchmarks/peers_gpu.py 2>&1 | tee "$out/peers.log"
           timeout 200 python3 benchmarks/peers_graphs.py 2>&1 | tee -a "$out/peers.log" ;;
    gpt) shift; timeout 590 python3 examples/train_gpt.py --steps "$1" --eval-every 250 \
             --checkpoint /tmp/ckpt/gpt.safetensors --plot "$out/gpt_loss.png" 2>&1 \
             | tr '\r' '\n' | grep -v "it/s\]$" | tee "$out/gpt.log" ;;
  esac
  shift
done
