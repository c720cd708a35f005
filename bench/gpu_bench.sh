#!/usr/bin/env bash
# gpu_bench.sh — headroom vs PyTorch eager on this GPU, in the same run:
# fp32, Adam(1e-3), CrossEntropyLoss, the three seed models at their seed
# batch and at 32x that batch (step time, samples/s, peak device memory), the
# largest batch that fits, and the main job (examples/fashion.model, 10
# epochs, batch 64: accuracy and wall time). Every measurement runs in a fresh
# process. Build first (make -j all, on any machine with nvcc), then on the
# GPU machine:
#
#     bash bench/gpu_bench.sh          # about 5 minutes on an H200
#
# PyTorch's step times run with cudnn.benchmark on (its best ordinary
# setting for speed) and its memory peaks come from its defaults, measured
# first in the same process (torch_gpu.py step --memory-first): benchmark's
# trials would inflate its reserved memory.
#
# Results: one JSON line per measurement in $RES/results.jsonl (RES defaults
# to $OUT on the device machine, else bench/results), logs beside it, and
# the tables of docs/benchmarks.md printed last. How each number is taken is
# in bench/bench_step.c and bench/torch_gpu.py; docs/benchmarks.md says it too.
#
# Knobs (environment): PARTS (default "info step largest fashion"; also
#   "diag": HR_PROFILE=2 per-node device-time tables and HR_CUDA_VERBOSE cuDNN choices for
#   the conv models, "algos": step times of the conv models under each
#   HR_CUDNN_ALGO mode, and "untuned": precise without HR_CUDNN_AUTOTUNE),
#   STEPS (30), WARM (5), DATA (Fashion-MNIST .gz folder; default
#   /usr/share/datasets/fashion-mnist, else .data), BUILD (build), PY
#   (python3), IMPLS ("headroom pytorch"), EPOCHS (10), LARGEST_S (60: time
#   cap of PyTorch's search per model), PROBE_S (30: a PyTorch probe that
#   gives no answer in this time counts as a failure), ALGOS (the modes
#   "algos" compares).
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
BUILD=${BUILD:-build}
PY=${PY:-python3}
RES=${RES:-${OUT:-bench/results}}
PARTS=${PARTS:-"info step largest fashion"}
IMPLS=${IMPLS:-"headroom pytorch"}
STEPS=${STEPS:-30}
WARM=${WARM:-5}
EPOCHS=${EPOCHS:-10}
LARGEST_S=${LARGEST_S:-60}
PROBE_S=${PROBE_S:-30}
mkdir -p "$RES"
J=$RES/results.jsonl
LOG=$RES/bench.log
touch "$J" "$LOG"

. scripts/cudnn_env.sh
[ -n "$CUDNN_FROM" ] && echo "cuDNN from $CUDNN_FROM" | tee -a "$LOG"
if [ -z "${DATA:-}" ]; then
    DATA=/usr/share/datasets/fashion-mnist
    [ -f "$DATA/train-images-idx3-ubyte.gz" ] || DATA=.data
fi

has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
want() { case " $IMPLS " in *" $1 "*) return 0 ;; esac; return 1; }
# tag PART [k=v...]: prefix every JSON line of stdin with "part" and extra fields
tag() {
    local extra="\"part\": \"$1\""
    shift
    for kv in "$@"; do extra="$extra, \"${kv%%=*}\": \"${kv#*=}\""; done
    sed -n "s/^{/{$extra, /p" >>"$J"
}
now() { date +%s.%N; }
# mark, then shown: print the result lines added since the mark
mark() { N0=$(wc -l <"$J"); }
shown() { tail -n +$((N0 + 1)) "$J"; }

CONFIGS="mlp:1024 mlp:32768 simple_cnn:128 simple_cnn:4096 deep_cnn:64 deep_cnn:2048"

if has info; then
    g=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
    cudnn=$(ldconfig -p 2>/dev/null | grep 'libcudnn\.so\.9 ' | head -1 | awk '{print $NF}')
    [ -n "$cudnn" ] && cudnn=$(basename "$(readlink -f "$cudnn")")
    tv=$($PY -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())' 2>/dev/null)
    echo "{\"part\": \"info\", \"gpu\": \"${g%%,*}\", \"driver\": \"$(echo "$g" | cut -d, -f2 | tr -d ' ')\", \"memory\": \"$(echo "$g" | cut -d, -f3 | sed 's/^ //')\", \"torch\": \"$tv\", \"cudnn\": \"system ${cudnn:-none}\", \"date\": \"$(date -u +%F)\", \"host_cpus\": $(nproc)}" >>"$J"
    tail -1 "$J"
fi

if has step; then
    for cfg in $CONFIGS; do
        m=${cfg%%:*} b=${cfg#*:}
        if want headroom; then
            echo "== step headroom $m $b" >>"$LOG"
            timeout 120 "$BUILD/bench/bench_step" "examples/$m.model" "$b" "$STEPS" "$WARM" cuda 2>>"$LOG" | tag step
        fi
        if want pytorch; then
            echo "== step pytorch $m $b" >>"$LOG"
            timeout 180 $PY bench/torch_gpu.py step --model "$m" --batch "$b" --steps "$STEPS" --warmup "$WARM" --memory-first \
                2>>"$LOG" | tag step
        fi
    done
fi

if has fashion; then
    if [ ! -f "$DATA/train-images-idx3-ubyte.gz" ]; then
        echo "fashion: no Fashion-MNIST files in $DATA (set DATA)" | tee -a "$LOG"
    else
        if want headroom; then
            mark
            t0=$(now)
            timeout 300 "$BUILD/headroom" train examples/fashion.model --data "$DATA" --epochs "$EPOCHS" --batch 64 \
                --device cuda >"$RES/fashion_headroom.log" 2>>"$LOG"
            rc=$?
            t1=$(now)
            $PY - "$RES/fashion_headroom.log" "$t0" "$t1" "$rc" <<'EOF' | tag fashion
import json, re, sys
log, t0, t1, rc = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
ep = [m.groups() for m in re.finditer(r"epoch (\d+)/\d+\s+train loss ([\d.]+)\s+test accuracy ([\d.]+)%\s+(\d+) samples/s\s+([\d.]+) s", open(log).read())]
print(json.dumps({"impl": "headroom", "model": "fashion", "batch": 64, "rc": rc, "epochs_run": len(ep),
                  "final_test_acc": float(ep[-1][2]) / 100 if ep else None,
                  "best_test_acc": max(float(e[2]) for e in ep) / 100 if ep else None,
                  "train_s": round(sum(float(e[4]) for e in ep), 2), "wall_s": round(t1 - t0, 2),
                  "epochs": [{"epoch": int(e[0]), "train_loss": float(e[1]), "test_acc": float(e[2]) / 100,
                              "samples_per_s": int(e[3]), "wall_s": float(e[4])} for e in ep]}))
EOF
            shown
        fi
        if want pytorch; then
            mark
            t0=$(now)
            timeout 400 $PY bench/torch_fashion.py --epochs "$EPOCHS" --batch 64 --device cuda --data "$DATA" \
                >"$RES/fashion_torch.json" 2>>"$LOG"
            rc=$?
            t1=$(now)
            $PY - "$RES/fashion_torch.json" "$t0" "$t1" "$rc" <<'EOF' | tag fashion
import json, sys
f, t0, t1, rc = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
try:
    d = json.loads(open(f).read().strip().splitlines()[-1])
except Exception:
    d = {}
d.update({"impl": "pytorch", "model": "fashion", "batch": 64, "rc": rc, "wall_s": round(t1 - t0, 2)})
print(json.dumps(d))
EOF
            shown
        fi
    fi
fi

if has diag; then
    for cfg in simple_cnn:128 simple_cnn:4096 deep_cnn:64 deep_cnn:2048 mlp:32768; do
        m=${cfg%%:*} b=${cfg#*:}
        echo "== diag $m $b" >>"$RES/diag.log"
        HR_PROFILE=2 HR_CUDA_VERBOSE=1 timeout 60 "$BUILD/bench/bench_step" "examples/$m.model" "$b" 10 3 cuda \
            >>"$RES/diag.log" 2>&1
    done
    echo "== diag fashion 64" >>"$RES/diag.log"
    HR_PROFILE=2 HR_CUDA_VERBOSE=1 timeout 60 "$BUILD/bench/bench_step" examples/fashion.model 64 50 5 cuda \
        >>"$RES/diag.log" 2>&1
fi

if has algos; then
    # untuned: the precise order without timing the candidates (HR_CUDNN_AUTOTUNE=0)
    for mode in ${ALGOS:-deterministic heuristic untuned precise}; do
        for cfg in simple_cnn:128 simple_cnn:4096 deep_cnn:64 deep_cnn:2048 fashion:64; do
            m=${cfg%%:*} b=${cfg#*:} algo=$mode tune=1
            [ "$mode" = untuned ] && algo=precise tune=0
            HR_CUDNN_ALGO=$algo HR_CUDNN_AUTOTUNE=$tune timeout 60 "$BUILD/bench/bench_step" "examples/$m.model" "$b" \
                "$STEPS" "$WARM" cuda 2>>"$LOG" | tag algos "algo=$mode"
        done
    done
fi

if has largest; then
    for m in mlp simple_cnn deep_cnn; do
        b=$(echo " $CONFIGS" | grep -o " $m:[0-9]*" | head -1 | cut -d: -f2)
        if want headroom; then
            echo "== largest headroom $m" >>"$LOG"
            mark
            timeout 240 "$BUILD/bench/bench_step" --largest "examples/$m.model" "$b" cuda 2>>"$LOG" | tag largest
            shown
        fi
        if want pytorch; then
            echo "== largest pytorch $m" >>"$LOG"
            mark
            timeout $((LARGEST_S + 2 * PROBE_S + 120)) $PY bench/torch_gpu.py largest --model "$m" --batch "$b" \
                --time-limit "$LARGEST_S" --probe-timeout "$PROBE_S" 2>>"$LOG" | tag largest
            shown
        fi
    done
fi

echo "results: $J" >&2
$PY bench/torch_gpu.py report "$J"
