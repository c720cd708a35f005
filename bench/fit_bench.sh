#!/usr/bin/env bash
# fit_bench.sh — issue 11's benchmarks on this GPU, headroom against PyTorch in
# the same run: for each seed model (1) the trade-off curve of memory budget
# against step time (headroom: recomputation planned to a byte budget;
# PyTorch: torch.utils.checkpoint per block, fp32 and autocast bf16) and (2)
# the largest batch that trains one step (headroom with and without
# recomputation, fp32 and bf16; PyTorch's exact search with and without
# checkpointing, fp32 and bf16; Accelerate's halving). Every measurement is a
# fresh process. Build first (make -j all, on any machine with nvcc), then on
# the GPU machine:
#
#     bash bench/fit_bench.sh          # stops starting measurements after TOTAL_S (470 s)
#
# Results: one JSON line per measurement (or per skip or failure) in
# $RES/fit.jsonl (RES: $OUT on the device machine, else bench/results), the
# commands' stderr in $RES/fit.log, and the tables last
# (python3 bench/torch_gpu.py report FILE... prints them again, from the
# files of several calls together).
#
# Time (estimates for an H100 from gpu_bench.sh's runs there): the curve
# about 105 s (13 processes a model), PyTorch's steps about 100 s (12
# processes of 7-9 s: importing torch and starting CUDA dominate), each
# PyTorch search about 20 s a model (at most LARGEST_S + PROBE_S + its
# child's start), each halving about 12 s a model, each bench_step --largest
# 20-50 s a model (its confirming step makes a host batch of many GB and
# tunes cuDNN at the huge shape): all of it about 15-17 minutes, more than
# one call of the device machine may take. So every measurement gets a time
# limit (never past TOTAL_S), one that would start with too little time
# left is recorded as skipped, and the run ends within TOTAL_S + ~15 s. The
# order is the priority: the curve and PyTorch's steps, then the largest
# batches in the order of LARGEST, each variant for every model before the
# next: first the numbers the issue's targets compare within one call
# (PyTorch fp32, headroom with recomputation in fp32 and in bf16). The
# default call gets about as far as hr_bf16_min. All of it in three calls of
# about 6-7 minutes each (the report takes their files together; for a
# variant found in several, the later file's line is shown):
#     LARGEST="torch_fp32 hr_min" bash bench/fit_bench.sh
#     PARTS="info largest" LARGEST="torch_fp32 hr_bf16_min hr_fp32 torch_bf16" bash bench/fit_bench.sh
#     PARTS="info largest" LARGEST="torch_fp32_ckpt torch_bf16_ckpt halving_fp32 halving_bf16 hr_bf16" \
#         bash bench/fit_bench.sh
#     python3 bench/torch_gpu.py report call1/fit.jsonl call2/fit.jsonl call3/fit.jsonl
#
# Knobs (environment): PARTS ("info curve torch_step largest"), LARGEST (the
#   largest-batch variants, in this order: torch_fp32 hr_min hr_bf16_min
#   hr_fp32 torch_bf16 halving_fp32 torch_fp32_ckpt torch_bf16_ckpt hr_bf16
#   halving_bf16; also hr_chunks and hr_bf16_chunks, with CHUNKS slices), CONFIGS (model:batch:halving start), STEPS (20), WARM (5),
#   TOTAL_S (470), LARGEST_S (30: time limit of each PyTorch search), PROBE_S
#   (20: a PyTorch probe that gives no answer in this time counts as a
#   failure), TOL (0.02: the exact search's bisection stops within this
#   fraction), MAX_PROBES (22: probes a PyTorch search makes at most), HR_LARGEST_S (150: time limit of bench_step --largest, whose
#   confirming step makes a host batch of many GB), BUDGET_OF (total: the
#   budgets are device totals, as --budget counts them, i.e. the no-recompute
#   plan's overhead and pages + f x its arena; arena: f x the arena alone),
#   BUILD (build), PY (python3), DEV (cuda; cpu runs the same commands on the
#   CPU, with small CONFIGS: a smoke test of this script).
set -u
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0
unset PYTORCH_CUDA_ALLOC_CONF # PyTorch's memory as its users get it: the allocator's defaults
BUILD=${BUILD:-build}
PY=${PY:-python3}
RES=${RES:-${OUT:-bench/results}}
DEV=${DEV:-cuda}
PARTS=${PARTS:-"info curve torch_step largest"}
LARGEST=${LARGEST:-"torch_fp32 hr_min hr_bf16_min hr_fp32 torch_bf16 halving_fp32 torch_fp32_ckpt torch_bf16_ckpt hr_bf16 halving_bf16"}
# The batch of the curve: gpu_bench.sh's and amp_bench.sh's 32x batches, where
# activations are most of the arena (planned on the CPU: mlp 32768 holds
# 403 MB of saved activations and 131 MB of input at its peak against 56 MB of
# weights, gradients and Adam state, of a 590 MB arena; simple_cnn 4096 and
# deep_cnn 2048 hold 0.7 MB and 2.8 MB of those in arenas of 412 MB and 1.5 GB),
# so a budget of half the arena asks recomputation to drop activations, and
# docs/benchmarks.md already has both sides' step time and memory there
# without recomputation. The same batch seeds the largest-batch searches.
# The halving start: Accelerate's answer is the largest start/2^k that
# trains, so any start above every limit gives the same answer; these are
# above what any variant fits on a 141 GB H200 (mlp 2^25: the input alone is
# 134 GB; simple_cnn 2^23 and deep_cnn 2^21: 103 GB). A start of 64x the seed
# batch, as first planned, fits outright for mlp and simple_cnn (their
# fp32 limits are about 3M and 370k on an H100) and would show nothing.
# hr_chunks, hr_bf16_chunks: the first layers in CHUNKS slices of the batch
# (--chunks; each slice recomputed), which at these batches leaves the input
# and the run's output as the only full-batch tensors.
CHUNKS=${CHUNKS:-256}
CONFIGS=${CONFIGS:-"mlp:32768:33554432 simple_cnn:4096:8388608 deep_cnn:2048:2097152"}
STEPS=${STEPS:-20}
WARM=${WARM:-5}
TOTAL_S=${TOTAL_S:-470}
LARGEST_S=${LARGEST_S:-30}
PROBE_S=${PROBE_S:-20}
TOL=${TOL:-0.02}
HR_LARGEST_S=${HR_LARGEST_S:-150}
MAX_PROBES=${MAX_PROBES:-22}
BUDGET_OF=${BUDGET_OF:-total}
END=$((SECONDS + TOTAL_S))
mkdir -p "$RES"
J=$RES/fit.jsonl
LOG=$RES/fit.log
: >"$J"
touch "$LOG"
TMP=$(mktemp)
ERR=$(mktemp)
trap 'rm -f "$TMP" "$ERR"' EXIT

# shellcheck source=scripts/cudnn_env.sh
. scripts/cudnn_env.sh
[ -n "$CUDNN_FROM" ] && echo "cuDNN from $CUDNN_FROM" | tee -a "$LOG"

has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

# record OUT ERR RC [KEY=VALUE...] [--get KEY[,KEY]]: one line into $J: the
# JSON lines of file OUT merged (a later line's keys win: plan's second line
# is its answer to the budget question, device_total as --budget counts it), after the
# KEY=VALUEs (digits as numbers); without any, an "error" line with RC and
# ERR's last line ("skip" as RC: a "skipped" line). --get prints those keys'
# values on stdout, space-separated (empty where missing); a summary goes to
# stderr.
record() {
    "$PY" - "$J" "$SECONDS" "$@" <<'EOF'
import json, sys
j, now, out, err, rc = sys.argv[1:6]
get, line = [], {}
args = sys.argv[6:]
while args:
    a = args.pop(0)
    if a == "--get":
        get = args.pop(0).split(",")
        continue
    k, _, v = a.partition("=")
    line[k] = int(v) if v.isdigit() else v
rows = []
try:
    for s in open(out, errors="replace"):
        if s.startswith("{"):
            try:
                rows.append(json.loads(s))
            except ValueError:
                pass
except OSError:
    pass
if rc == "skip":
    pass
elif not rows:
    try:
        tail = [s.strip() for s in open(err, errors="replace") if s.strip()][-1:]
    except OSError:
        tail = []
    line["error"] = "exit %s and no JSON line%s" % (rc, " (killed by its time limit)" if rc in ("124", "137") else "")
    line["rc"] = int(rc)
    if tail:
        line["stderr"] = tail[0][:300]
else:
    fixed = set(line)
    for r in rows:
        line.update((k, v) for k, v in r.items() if k not in fixed)
    if rc != "0":
        line["rc"] = int(rc)
with open(j, "a") as f:
    f.write(json.dumps(line) + "\n")
what = " ".join(str(line.get(k)) for k in ("part", "variant", "prec", "point", "model") if k in line)
facts = [k + "=" + str(line[k]) for k in ("skipped", "error", "median_ms", "recompute", "predicted_ms", "arena_bytes",
                                          "largest_confirmed", "largest", "fits") if k in line]
print("[%4s s] %s: %s" % (now, what, ", ".join(facts)[:300]), file=sys.stderr)
if get:
    print(" ".join("" if line.get(k) is None else str(line[k]) for k in get))
EOF
}

# measure LIMIT NEED KEY=VALUE... [--get KEY[,KEY]] -- COMMAND...: COMMAND under a
# time limit of LIMIT s, less where TOTAL_S would be passed; recorded as
# skipped if fewer than NEED s are left.
measure() {
    local limit=$1 need=$2 t rc kv=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        kv+=("$1")
        shift
    done
    shift
    t=$((END - SECONDS - 5))
    [ "$t" -gt "$limit" ] && t=$limit
    if [ "$t" -lt "$need" ]; then
        record /dev/null /dev/null skip "${kv[@]}" "skipped=$t s left of TOTAL_S=$TOTAL_S ($need s needed)"
        return 1
    fi
    echo "== ${kv[*]} (limit $t s): $*" >>"$LOG"
    timeout -k 10 "$t" "$@" >"$TMP" 2>"$ERR"
    rc=$?
    cat "$ERR" >>"$LOG"
    record "$TMP" "$ERR" "$rc" "${kv[@]}" "limit_s=$t"
}

# budget F A T: the budget for F x the arena A of a plan whose device total is T
budget() {
    local f=$1 a=$2 t=$3 v
    v=$(awk -v f="$f" -v a="$a" 'BEGIN { printf "%.0f", f * a }')
    if [ "$BUDGET_OF" = total ]; then echo $((t - a + v)); else echo "$v"; fi
}

# torch_largest VARIANT MODEL BATCH [FLAGS...]: PyTorch's search, its own time
# limit cut to what is left, so that it ends with its JSON line in time.
torch_largest() {
    local v=$1 m=$2 b=$3 tl
    shift 3
    tl=$((END - SECONDS - 5 - PROBE_S - 40))
    [ "$tl" -gt "$LARGEST_S" ] && tl=$LARGEST_S
    [ "$tl" -lt 10 ] && tl=10 # measure() skips it then: not enough time left
    measure $((tl + PROBE_S + 40)) $((10 + PROBE_S + 40)) part=fit_largest variant="$v" model="$m" batch="$b" -- \
        "$PY" bench/torch_gpu.py largest --device "$DEV" --model "$m" --batch "$b" --time-limit "$tl" \
        --probe-timeout "$PROBE_S" --tol "$TOL" --max-probes "$MAX_PROBES" "$@"
}

if has info; then
    g=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
    cudnn=$(ldconfig -p 2>/dev/null | grep 'libcudnn\.so\.9 ' | head -1 | awk '{print $NF}')
    [ -n "$cudnn" ] && cudnn=$(basename "$(readlink -f "$cudnn")")
    tv=$($PY -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())' 2>/dev/null)
    echo "{\"part\": \"info\", \"gpu\": \"${g%%,*}\", \"driver\": \"$(echo "$g" | cut -d, -f2 | tr -d ' ')\", \"memory\": \"$(echo "$g" | cut -d, -f3 | sed 's/^ //')\", \"torch\": \"$tv\", \"cudnn\": \"${cudnn:+system $cudnn}${CUDNN_FROM:+from PyTorch: $CUDNN_FROM}\", \"date\": \"$(date -u +%F)\", \"host_cpus\": $(nproc), \"configs\": \"$CONFIGS\", \"budget_of\": \"$BUDGET_OF\", \"total_s\": $TOTAL_S}" >>"$J"
    tail -1 "$J"
fi

# (1a) headroom: the plan without recomputation (arena A0, device total T0) and
# the smallest (--recompute min), then step time and plan at budgets of A0,
# 0.75 A0, 0.5 A0 and the smallest; bf16 without recomputation and the smallest.
if has curve; then
    for cfg in $CONFIGS; do
        IFS=: read -r m b _ <<<"$cfg"
        M=examples/$m.model
        P=(part=curve_plan model="$m" batch="$b" prec=fp32)
        S=(part=curve model="$m" batch="$b" prec=fp32)
        read -r A0 T0 <<<"$(measure 60 5 "${P[@]}" point=none --get arena_bytes,device_total -- \
            "$BUILD/headroom" plan "$M" --batch "$b" --device "$DEV" --json)"
        read -r AMIN TMIN <<<"$(measure 90 5 "${P[@]}" point=min --get arena_bytes,device_total -- \
            "$BUILD/headroom" plan "$M" --batch "$b" --device "$DEV" --recompute min --json)"
        measure 120 10 "${S[@]}" point=none -- "$BUILD/bench/bench_step" "$M" "$b" "$STEPS" "$WARM" "$DEV"
        BMIN=""
        [ -n "$AMIN" ] && [ -n "$TMIN" ] && BMIN=$(budget 1 "$AMIN" "$TMIN")
        for point in A0 0.75 0.5 min; do
            bud=""
            case $point in
                min) bud=$BMIN ;;
                *) [ -n "$A0" ] && [ -n "$T0" ] && bud=$(budget "${point/A0/1}" "$A0" "$T0") ;;
            esac
            if [ -z "$bud" ]; then
                record /dev/null /dev/null skip "${S[@]}" point="$point" "skipped=no budget: its plan gave no arena"
                continue
            fi
            measure 90 5 "${P[@]}" point="$point" budget_bytes="$bud" -- \
                "$BUILD/headroom" plan "$M" --batch "$b" --device "$DEV" --recompute auto --budget "$bud" --json
            if [ -n "$BMIN" ] && [ "$bud" -lt "$BMIN" ]; then
                record /dev/null /dev/null skip "${S[@]}" point="$point" budget_bytes="$bud" \
                    "skipped=below the smallest plan's budget $BMIN: no step to time"
                continue
            fi
            got=$(measure 120 10 "${S[@]}" point="$point" budget_bytes="$bud" --get median_ms -- \
                "$BUILD/bench/bench_step" "$M" "$b" "$STEPS" "$WARM" "$DEV" --recompute auto --budget "$bud")
            if [ "$point" = min ] && [ -z "$got" ]; then # the search's own smallest, without a budget
                measure 120 10 "${S[@]}" point=min_mode -- \
                    "$BUILD/bench/bench_step" "$M" "$b" "$STEPS" "$WARM" "$DEV" --recompute min
            fi
        done
        S=(part=curve model="$m" batch="$b" prec=bf16)
        measure 120 10 "${S[@]}" point=none -- \
            env HR_BENCH_PRECISION=bf16 "$BUILD/bench/bench_step" "$M" "$b" "$STEPS" "$WARM" "$DEV"
        measure 120 10 "${S[@]}" point=min -- \
            env HR_BENCH_PRECISION=bf16 "$BUILD/bench/bench_step" "$M" "$b" "$STEPS" "$WARM" "$DEV" --recompute min
    done
fi

# (1b) PyTorch at the same batch: without and with checkpointing, fp32 and
# autocast bf16; peaks with PyTorch's defaults, then times with
# cudnn.benchmark on (--memory-first).
if has torch_step; then
    for cfg in $CONFIGS; do
        IFS=: read -r m b _ <<<"$cfg"
        for v in fp32 fp32_ckpt bf16 bf16_ckpt; do
            flags=()
            case $v in bf16*) flags+=(--amp bf16) ;; esac
            case $v in *_ckpt) flags+=(--checkpoint) ;; esac
            measure 150 20 part=torch_step variant="$v" model="$m" batch="$b" -- \
                "$PY" bench/torch_gpu.py step --device "$DEV" --model "$m" --batch "$b" --steps "$STEPS" \
                --warmup "$WARM" --no-extra --memory-first ${flags[@]+"${flags[@]}"}
        done
    done
fi

# (2) the largest batch that trains one step, variant by variant in the order
# of LARGEST, every model before the next variant.
if has largest; then
    for v in $LARGEST; do
        for cfg in $CONFIGS; do
            IFS=: read -r m b start <<<"$cfg"
            M=examples/$m.model
            H=(part=fit_largest variant="$v" model="$m" batch="$b")
            HL=("$BUILD/bench/bench_step" --largest "$M" "$b" "$DEV")
            case $v in
                hr_fp32) measure "$HR_LARGEST_S" 30 "${H[@]}" -- "${HL[@]}" ;;
                hr_min) measure "$HR_LARGEST_S" 30 "${H[@]}" -- "${HL[@]}" --recompute min ;;
                hr_bf16) measure "$HR_LARGEST_S" 30 "${H[@]}" -- "${HL[@]}" --precision bf16 ;;
                hr_bf16_min) measure "$HR_LARGEST_S" 30 "${H[@]}" -- "${HL[@]}" --precision bf16 --recompute min ;;
                hr_chunks) measure "$HR_LARGEST_S" 30 "${H[@]}" -- "${HL[@]}" --chunks "$CHUNKS" ;;
                hr_bf16_chunks) measure "$HR_LARGEST_S" 30 "${H[@]}" -- "${HL[@]}" --precision bf16 --chunks "$CHUNKS" ;;
                torch_fp32) torch_largest "$v" "$m" "$b" ;;
                torch_bf16) torch_largest "$v" "$m" "$b" --amp bf16 ;;
                torch_fp32_ckpt) torch_largest "$v" "$m" "$b" --checkpoint ;;
                torch_bf16_ckpt) torch_largest "$v" "$m" "$b" --amp bf16 --checkpoint ;;
                halving_fp32) torch_largest "$v" "$m" "$b" --halving --start "$start" ;;
                halving_bf16) torch_largest "$v" "$m" "$b" --halving --start "$start" --amp bf16 ;;
                *) echo "fit_bench: unknown LARGEST variant '$v'" >&2 ;;
            esac
        done
    done
fi

echo "results: $J ($SECONDS s of TOTAL_S=$TOTAL_S; $(grep -c '"skipped"' "$J") skipped, $(grep -c '"error"' "$J") failed)" >&2
$PY bench/torch_gpu.py report "$J"
