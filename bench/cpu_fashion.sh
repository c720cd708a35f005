#!/usr/bin/env bash
# cpu_fashion.sh — the main job on this CPU: the default model, one epoch of
# Fashion-MNIST (batch 64, Adam), headroom vs PyTorch with the same thread
# count, in the same run. Usage: bench/cpu_fashion.sh [threads=2] [epochs=1]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh build bench
make -j"$(nproc)" build/headroom >/dev/null
th=${1:-2}; ep=${2:-1}
h=$(OMP_NUM_THREADS=$th ./build/headroom train examples/fashion.model --data fashion-mnist --epochs "$ep" \
    --batch 64 --device cpu -q | tee /dev/stderr | tail -1)
t=$(/usr/bin/python3 bench/torch_fashion.py --epochs "$ep" --batch 64 --threads "$th" --device cpu 2>/dev/null)
/usr/bin/python3 - "$h" "$t" <<'PY'
import json, re, sys
h, t = sys.argv[1], json.loads(sys.argv[2])
hs = float(re.search(r"([0-9.]+) samples/s", h).group(1))
ha = float(re.search(r"test accuracy ([0-9.]+)%", h).group(1))
ts = t["epochs"][-1]["samples_per_s"]; ta = 100 * t["final_test_acc"]
print(f"{'':10} {'samples/s':>10} {'test acc':>9}")
print(f"{'headroom':10} {hs:10.0f} {ha:8.2f}%")
print(f"{'pytorch':10} {ts:10.0f} {ta:8.2f}%   (torch {t['torch']}, {t['threads']} threads)")
print(f"ratio (headroom/pytorch samples/s): {hs/ts:.2f}")
PY
