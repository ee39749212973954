#!/usr/bin/env bash
# One session's closing measurements on the GPU machine, from the project root after installing
# .whl/ (README): bash benchmarks/session_run.sh part1 | part2. Logs under $OUT (or
# benchmarks/out/); JSON lines and summaries on stdout. `closing`: part1's essentials and the
# peers in one call, for a short device budget (with two cold first calls after compileall and
# the serial W2 kernel table in $out/w2_serial.txt).
#   part1: pytest -m cuda on a cold kernel cache (timed), W2's cold first call (twice as
#          installed, twice after compileall: a pip install writes bytecode, this image's
#          --no-compile install does not), W2's first call on a warm disk cache (warm2, warm3:
#          fresh processes; warm1 fills the cache), bench_gpu W3 W4 W5 W1 W2, host_split W5 W1 W2
#   part2: the peers (torch eager, torch + graph, JAX), W2 with TF32, train_loop, train_gpt
set -u
out=${OUT:-benchmarks/out}
mkdir -p "$out"
# everything printed also goes to $out/session.log: the device tool returns only the last
# 12,000 characters of a call's output (the tenth session's closing call lost its first lines)
exec > >(tee -a "$out/session.log") 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
date -u +%Y-%m-%dT%H:%M:%SZ
export FUNCGRAD_CACHE_DIR=${FUNCGRAD_CACHE_DIR:-$(mktemp -d)}
case "${1:-part1}" in
  part1)
    t0=$SECONDS
    python3 -m pytest -m cuda -n 16 --dist worksteal -p no:benchmark -p no:cacheprovider -q \
      > "$out/cuda_tests.log" 2>&1
    echo "pytest -m cuda cold: rc=$? $((SECONDS - t0)) s; $(tail -1 "$out/cuda_tests.log")"
    for i in 1 2; do FUNCGRAD_CACHE_DIR=$(mktemp -d) python3 benchmarks/cold_compile.py 2>/dev/null | grep '^{'; done
    python3 -m compileall -q .site funcgrad > /dev/null 2>&1
    for i in 1 2; do FUNCGRAD_CACHE_DIR=$(mktemp -d) python3 benchmarks/cold_compile.py 2>/dev/null | grep '^{'; done
    warm=$(mktemp -d)   # the warm-disk first call: fresh processes on a filled kernel cache
    for i in 1 2 3; do FUNCGRAD_CACHE_DIR=$warm python3 benchmarks/cold_compile.py 2>/dev/null | grep '^{' | sed "s/^/warm$i /"; done
    python3 benchmarks/bench_gpu.py W3 W4 W5 W1 W2 2>&1 | grep '^{' | grep -v '"plan"'
    python3 benchmarks/host_split.py W5 W1 W2 2>&1 | grep '^{' ;;
  part2)
    PEERS_JAX_GPT=0 python3 benchmarks/peers_gpu.py 2>&1 | grep '^{'
    python3 benchmarks/peers_graphs.py 2>&1 | grep '^{'
    python3 benchmarks/w2_breakdown.py --tf32 2>&1 | tail -4
    python3 benchmarks/train_loop.py --steps 200 2>&1 | grep '^{'
    python3 examples/train_gpt.py --steps 1000 --eval-every 250 --checkpoint /tmp/ckpt/g.st \
      --plot "$out/gpt_loss.png" 2>&1 | tr '\r' '\n' | grep -E "val|trained|compil" ;;
  closing)   # one call for a short device budget: part1's essentials and the peers
    t0=$SECONDS
    python3 -m pytest -m cuda -n 16 --dist worksteal -p no:benchmark -p no:cacheprovider -q \
      --durations=12 > "$out/cuda_tests.log" 2>&1
    echo "pytest -m cuda cold: rc=$? $((SECONDS - t0)) s; $(tail -1 "$out/cuda_tests.log")"
    grep -E "^[0-9.]+s (call|setup)" "$out/cuda_tests.log" | head -12
    python3 -m compileall -q .site funcgrad > /dev/null 2>&1
    for i in 1 2; do FUNCGRAD_CACHE_DIR=$(mktemp -d) python3 benchmarks/cold_compile.py 2>/dev/null | grep '^{' | cut -c1-300 | sed "s/^/cold$i /"; done
    warm=$(mktemp -d)
    for i in 1 2 3; do FUNCGRAD_CACHE_DIR=$warm python3 benchmarks/cold_compile.py 2>/dev/null | grep '^{' | cut -c1-420 | sed "s/^/run$i /"; done
    python3 benchmarks/bench_gpu.py W5 W1 W2 W3 W4 2>&1 | grep '^{' | grep -v '"plan"'
    python3 benchmarks/host_split.py W5 W1 2>&1 | grep '^{'
    PEERS_JAX_GPT=0 python3 benchmarks/peers_gpu.py 2>&1 | grep '^{'
    python3 benchmarks/peers_graphs.py 2>&1 | grep '^{'
    python3 benchmarks/w2_breakdown.py --tf32 2>&1 | grep 'step (TF32)'
    python3 benchmarks/bench_gemm.py --w4 2>&1 | grep '"W4_'
    python3 benchmarks/bench_kernels.py 2>&1 | grep '^{'
    FUNCGRAD_CONCURRENT_GRAPHS=0 python3 benchmarks/w2_breakdown.py > "$out/w2_serial.txt" 2>&1
    grep 'W2 step' "$out/w2_serial.txt"
    python3 examples/train_gpt.py --steps 1000 --eval-every 250 --checkpoint /tmp/ckpt/g.st \
      2>&1 | tr '\r' '\n' | grep -E "val|trained|compil" ;;
esac
date -u +%Y-%m-%dT%H:%M:%SZ
