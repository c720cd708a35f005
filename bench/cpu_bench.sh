#!/usr/bin/env bash
# cpu_bench.sh — headroom vs PyTorch (Debian's python3-torch) on this CPU, the
# three seed models at their seed batches, same thread count, same run.
# Usage: bench/cpu_bench.sh [threads=2] [steps=10]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh build bench
make -j"$(nproc)" build/bench/bench_step >/dev/null
th=${1:-2}; steps=${2:-10}
export OMP_NUM_THREADS=$th
printf "%-12s %6s %12s %12s %8s\n" model batch headroom_ms torch_ms ratio
for mb in "mlp 1024" "simple_cnn 128" "deep_cnn 64"; do
    set -- $mb
    h=$(./build/bench/bench_step examples/$1.model $2 "$steps" 3 cpu)
    t=$(/usr/bin/python3 bench/torch_cpu_step.py --model $1 --batch $2 --threads "$th" --steps "$steps" --warmup 3)
    hm=$(echo "$h" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["median_ms"])')
    tm=$(echo "$t" | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("median_ms"))')
    printf "%-12s %6s %12.1f %12.1f %8.2f\n" "$1" "$2" "$hm" "$tm" "$(/usr/bin/python3 -c "print($hm/$tm)")"
done
