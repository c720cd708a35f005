#!/usr/bin/env bash
# suite_bench.sh — the standard CNNs (VGG-16-BN, ResNet-18, ResNet-20,
# MobileNetV1; 3x32x32 inputs, 10 classes) on this GPU at batch 128 and 1024:
# headroom's median step (bench/bench_step, Adam(1e-3), fp32) against PyTorch
# eager with cudnn.benchmark (bench/torch_gpu.py step --benchmark), each in a
# fresh process, in one call. One JSON line each in $RES/suite.jsonl (RES: $OUT
# on the device machine, else bench/results), a table last.
#
# MODES: headroom's settings, each a column (default "precise fastest"):
#   precise  the default: cuDNN engines without FFT or Winograd, timed
#   fastest  HR_CUDNN_ALGO=fastest: every engine timed, FFT and Winograd too
#            (PyTorch's rule under cudnn.benchmark)
#   tf32     fastest with TF32 convolutions and products (--tf32)
# PyTorch runs IEEE fp32 (TF32 off, as headroom's precise and fastest), and
# its extra loop gives the TF32-convolution time (PyTorch's default precision).
# COMPILE=1 adds PyTorch with torch.compile (default mode, cudnn.benchmark on,
# compiled in its warm-up steps) as another column, and each mode's ratio to it.
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
BUILD=${BUILD:-build}
PY=${PY:-python3}
RES=${RES:-${OUT:-bench/results}}
STEPS=${STEPS:-20}
WARM=${WARM:-5}
BATCHES=${BATCHES:-"128 1024"}
MODELS=${MODELS:-"vgg16_bn resnet18 resnet20 mobilenet_v1"}
MODES=${MODES:-"precise fastest"}
COMPILE=${COMPILE:-0}
mkdir -p "$RES"
J=$RES/suite.jsonl
touch "$J"
. scripts/cudnn_env.sh
for m in $MODELS; do
    f=bench/models/$m.model
    [ -f "$f" ] || f=examples/$m.model
    for b in $BATCHES; do
        for mode in $MODES; do
            case $mode in
            precise) env=(HR_CUDNN_ALGO=precise) args=() ;;
            fastest) env=(HR_CUDNN_ALGO=fastest) args=() ;;
            tf32) env=(HR_CUDNN_ALGO=fastest) args=(--tf32) ;;
            *) echo "suite_bench.sh: MODES: '$mode' is not precise, fastest or tf32" >&2; exit 2 ;;
            esac
            env "${env[@]}" timeout 180 "$BUILD/bench/bench_step" "$f" "$b" "$STEPS" "$WARM" cuda "${args[@]}" \
                2>>"$RES/suite.log" | sed "s/^{/{\"suite\": \"$m\", \"mode\": \"$mode\", /" >>"$J"
        done
        timeout 300 $PY bench/torch_gpu.py step --model "$m" --batch "$b" --steps "$STEPS" --warmup "$WARM" --benchmark \
            2>>"$RES/suite.log" | sed "s/^{/{\"suite\": \"$m\", /" >>"$J"
        [ "$COMPILE" = 1 ] && timeout 400 $PY bench/torch_gpu.py step --model "$m" --batch "$b" --steps "$STEPS" \
            --warmup "$WARM" --benchmark --compile --no-extra 2>>"$RES/suite.log" |
            sed "s/^{/{\"suite\": \"$m\", /" >>"$J"
    done
done
$PY - "$J" $MODES <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
modes = sys.argv[2:]
cell = {}
for r in rows:
    impl = r.get("impl")
    key = r.get("mode") if impl == "headroom" else "compile" if impl == "pytorch compile" else "pytorch"
    cell[(r["suite"], r.get("batch"), key or "precise")] = r
def ms(r, k="median_ms"):
    return r.get(k) if r else None
def ratio(h, ref):
    return "%.2f" % (h / ref) if h and ref else "-"
comp = any(k[2] == "compile" for k in cell)
print("| model | batch | " + " | ".join("headroom %s ms" % m for m in modes) +
      " | PyTorch ms | PyTorch TF32-conv ms |" + (" PyTorch compiled ms |" if comp else "") + " " +
      " | ".join("%s / PyTorch" % m for m in modes) + " |" +
      ("".join(" %s / compiled |" % m for m in modes if m != "tf32") if comp else ""))
ncol = 2 * len(modes) + 2 + (1 + len([m for m in modes if m != "tf32"]) if comp else 0)
print("|---|---:|" + "---:|" * ncol)
for m, b in sorted({(k[0], k[1]) for k in cell}):
    t = cell.get((m, b, "pytorch"))
    p, ptf, pc = ms(t), ms(t, "tf32_conv_median_ms"), ms(cell.get((m, b, "compile")))
    hs = [ms(cell.get((m, b, mode))) for mode in modes]
    r1 = [ratio(h, ptf if mode == "tf32" else p) for mode, h in zip(modes, hs)]
    line = "| %s | %s | %s | %s | %s |" % (m, b, " | ".join(str(h) for h in hs), p, ptf)
    if comp:
        line += " %s |" % pc
    line += " " + " | ".join(r1) + " |"
    if comp:
        line += "".join(" %s |" % ratio(h, pc) for mode, h in zip(modes, hs) if mode != "tf32")
    print(line)
PYEOF
