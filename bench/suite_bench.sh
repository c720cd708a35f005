#!/usr/bin/env bash
# suite_bench.sh — the standard CNNs (VGG-16-BN, ResNet-18, ResNet-20,
# MobileNetV1; 3x32x32 inputs, 10 classes) on this GPU at batch 128 and 1024:
# headroom's median step (bench/bench_step, Adam(1e-3), fp32) against PyTorch
# eager with cudnn.benchmark (bench/torch_gpu.py step --benchmark), each in a
# fresh process, in one call. One JSON line each in $RES/suite.jsonl (RES: $OUT
# on the device machine, else bench/results), a table last.
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
BUILD=${BUILD:-build}
PY=${PY:-python3}
RES=${RES:-${OUT:-bench/results}}
STEPS=${STEPS:-20}
WARM=${WARM:-5}
BATCHES=${BATCHES:-"128 1024"}
mkdir -p "$RES"
J=$RES/suite.jsonl
touch "$J"
. scripts/cudnn_env.sh
for m in vgg16_bn resnet18 resnet20 mobilenet_v1; do
    f=bench/models/$m.model
    [ -f "$f" ] || f=examples/$m.model
    for b in $BATCHES; do
        timeout 180 "$BUILD/bench/bench_step" "$f" "$b" "$STEPS" "$WARM" cuda 2>>"$RES/suite.log" |
            sed "s/^{/{\"suite\": \"$m\", /" >>"$J"
        timeout 300 $PY bench/torch_gpu.py step --model "$m" --batch "$b" --steps "$STEPS" --warmup "$WARM" --benchmark \
            --no-extra 2>>"$RES/suite.log" | sed "s/^{/{\"suite\": \"$m\", /" >>"$J"
    done
done
$PY - "$J" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cell = {}
for r in rows:
    cell[(r["suite"], r.get("batch"), r.get("impl"))] = r
print("| model | batch | headroom ms | PyTorch ms | ratio |")
print("|---|---|---|---|---|")
for (m, b, impl), r in sorted(cell.items()):
    if impl != "headroom":
        continue
    t = cell.get((m, b, "pytorch"), {})
    h, p = r.get("median_ms"), t.get("median_ms")
    print("| %s | %s | %s | %s | %s |" % (m, b, h, p, "%.2f" % (h / p) if h and p else "-"))
PYEOF
