#!/usr/bin/env bash
# amp_bench.sh — mixed precision on this GPU, headroom against PyTorch
# autocast in the same run: the seed models at their seed batch and 32x,
# bf16 and fp16 (PyTorch: torch.autocast, GradScaler for fp16,
# cudnn.benchmark on for the times; a second PyTorch run with its defaults
# for memory), Adam(1e-3), CrossEntropyLoss; fp32 beside them for reference.
# Each measurement is a fresh process. Build first (make -j all), then on the
# GPU machine:   bash bench/amp_bench.sh
# One JSON line per measurement in $RES/amp.jsonl (RES: $OUT, else
# bench/results); a table last.
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
BUILD=${BUILD:-build}
PY=${PY:-python3}
RES=${RES:-${OUT:-bench/results}}
STEPS=${STEPS:-30}
WARM=${WARM:-5}
CONFIGS=${CONFIGS:-"mlp:1024 mlp:32768 simple_cnn:128 simple_cnn:4096 deep_cnn:64 deep_cnn:2048"}
PRECS=${PRECS:-"fp32 bf16 fp16"}
mkdir -p "$RES"
J="$RES/amp.jsonl"
: >"$J"
. scripts/cudnn_env.sh
for cfg in $CONFIGS; do
    m=${cfg%%:*}
    b=${cfg##*:}
    for p in $PRECS; do
        amp=""
        [ "$p" != fp32 ] && amp="--amp $p"
        HR_BENCH_PRECISION=$p timeout 300 "$BUILD/bench/bench_step" "examples/$m.model" "$b" "$STEPS" "$WARM" cuda \
            | sed "s/^{/{\"prec\": \"$p\", /" >>"$J" 2>>"$RES/amp.log"
        timeout 300 $PY bench/torch_gpu.py step --model "$m" --batch "$b" --steps "$STEPS" --warmup "$WARM" \
            --no-extra --benchmark $amp | sed "s/^{/{\"prec\": \"$p\", \"run\": \"speed\", /" >>"$J" 2>>"$RES/amp.log"
        timeout 300 $PY bench/torch_gpu.py step --model "$m" --batch "$b" --steps 5 --warmup 2 \
            --no-extra $amp | sed "s/^{/{\"prec\": \"$p\", \"run\": \"memory\", /" >>"$J" 2>>"$RES/amp.log"
    done
done
$PY - "$J" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def get(impl, m, b, p, run=None):
    for r in rows:
        if r.get("impl") == impl and r.get("model") in (m, "examples/%s.model" % m) and r.get("batch") == b \
           and r.get("prec") == p and (run is None or r.get("run") == run):
            return r
MiB = 1 << 20
print("%-11s %6s %5s %10s %10s %6s %12s %12s %12s" % ("model", "batch", "prec", "hr ms", "torch ms", "ratio",
      "hr total", "torch resv", "torch used"))
seen = []
for r in rows:
    key = (r.get("model"), r.get("batch"))
    if r.get("impl") != "headroom" or key in seen:
        continue
    seen.append(key)
for m, b in seen:
    name = m.replace("examples/", "").replace(".model", "")
    for p in ("fp32", "bf16", "fp16"):
        h, t, tm = get("headroom", m, b, p), get("pytorch", name, b, p, "speed"), get("pytorch", name, b, p, "memory")
        if not h:
            continue
        hm = h.get("median_ms", float("nan"))
        tms = t.get("median_ms", float("nan")) if t else float("nan")
        print("%-11s %6d %5s %10.3f %10.3f %6.2f %10.1f M %10.1f M %10.1f M" % (
            name, b, p, hm, tms, hm / tms if tms == tms and tms else float("nan"),
            h.get("job_total", 0) / MiB, (tm or {}).get("max_reserved", 0) / MiB,
            (tm or {}).get("device_used_end", 0) / MiB))
PYEOF
# the main job in bf16: examples/fashion.model, 10 epochs, batch 64, against
# PyTorch autocast bf16 (cudnn.benchmark on) on the same data; wall time and
# final test accuracy (PARTS=none skips it)
if [ "${FASHION:-1}" = 1 ]; then
    DATA=${DATA:-/usr/share/datasets/fashion-mnist}
    [ -f "$DATA/train-images-idx3-ubyte.gz" ] || DATA=.data
    if [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
        t0=$(date +%s.%N)
        timeout 400 "$BUILD/headroom" train examples/fashion.model --data "$DATA" --epochs 10 --batch 64 \
            --device cuda --precision bf16 -q >"$RES/fashion_bf16_headroom.log" 2>&1
        t1=$(date +%s.%N)
        echo "headroom bf16 fashion: $($PY -c "print(round($t1 - $t0, 1))") s wall, $(grep -c '^epoch' "$RES/fashion_bf16_headroom.log") epochs"
        tail -2 "$RES/fashion_bf16_headroom.log"
        t0=$(date +%s.%N)
        timeout 600 $PY bench/torch_fashion.py --device cuda --epochs 10 --batch 64 --data "$DATA" --amp bf16 \
            --benchmark >"$RES/fashion_bf16_torch.json" 2>"$RES/fashion_bf16_torch.log"
        t1=$(date +%s.%N)
        echo "pytorch bf16 fashion: $($PY -c "print(round($t1 - $t0, 1))") s wall"
        $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print('pytorch train_s', d['train_s'], 'final acc', d['final_test_acc'])" "$RES/fashion_bf16_torch.json"
    else
        echo "fashion: no Fashion-MNIST files in $DATA"
    fi
fi
