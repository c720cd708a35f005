#!/usr/bin/env bash
# gpt2_bench.sh — GPT-2 124M (examples/gpt2.model: 12 layers, 12 heads, 768
# wide, context 1024, vocabulary 50257, tied lm_head) on this GPU, headroom
# against PyTorch eager and torch.compile, bf16 mixed precision (autocast's
# rules on both sides: fp32 parameters, gradients and AdamW state), AdamW(1e-3,
# weight decay 0.01), random token ids, micro-batch B, every part its own process:
#   headroom  bench/bench_step examples/gpt2.model B STEPS WARMUP cuda --precision bf16
#             --optim adamw: median step, tokens/s, the planned device total and
#             NVML's peak of the process
#   torch     bench/torch_gpt.py --random-tokens ... --precision bf16 --fused (eager):
#             median step, tokens/s, max reserved, NVML's peak
#   compile   the same with --compile
#   largest   the largest micro-batch: bench_step --largest (planned, then one
#             step confirms it) and torch_gpt.py --largest (doubling, bisection)
# A step, on both sides: the batch from host memory, forward, loss, backward,
# AdamW's update, the loss read back; the host clock around it; the median of
# STEPS after WARMUP. Run from the repo root of a built tree (make all with
# nvcc; BUILD names the build folder):
#   bash bench/gpt2_bench.sh                       # B=8, 20 steps after 5
#   B=16 LARGEST=1 bash bench/gpt2_bench.sh        # and the largest micro-batches
#   PARTS="compile" bash bench/gpt2_bench.sh       # one part alone
# Env: B (8), STEPS (20), WARMUP (5), BUILD (build), PY (python3), FUSED (1:
# AdamW(fused=True); 0: PyTorch's default), LARGEST (0), PARTS ("headroom
# torch compile", plus largest when LARGEST=1), PART_TIMEOUT (seconds a part,
# 420; a device command limited to 600 s fits the three timing parts, and
# largest is best run alone: PARTS=largest). One JSON line per measurement in
# $RES/gpt2.jsonl (RES: $OUT on the device machine, else bench/results), each
# tagged with its part and this run's start; stderr in $RES/gpt2.log; a table
# of this run last, naming the GPU.
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
BUILD=${BUILD:-build}
PY=${PY:-python3}
RES=${RES:-${OUT:-bench/results}}
B=${B:-8}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
FUSED=${FUSED:-1}
LARGEST=${LARGEST:-0}
PARTS=${PARTS:-"headroom torch compile"}
[ "$LARGEST" = 1 ] && case " $PARTS " in *" largest "*) ;; *) PARTS="$PARTS largest" ;; esac
PART_TIMEOUT=${PART_TIMEOUT:-420}
mkdir -p "$RES"
J=$RES/gpt2.jsonl
LOG=$RES/gpt2.log
touch "$J" "$LOG"
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
M=examples/gpt2.model
T=1024
HR=("$BUILD/bench/bench_step")
TG=("$PY" bench/torch_gpt.py --random-tokens --vocab 50257 --block $T --layers 12 --heads 12 --width 768 --bias --gelu tanh
    --dropout 0 --precision bf16 --lr 1e-3)
[ "$FUSED" = 1 ] && TG+=(--fused)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
RUN=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# part NAME CMD...: CMD's JSON lines tagged with the part and this run; a line
# with the exit status when it printed none (a crash, a timeout: 124).
part() {
    local name=$1
    shift
    echo "== $name: $*" >>"$LOG"
    local out rc
    out=$(timeout "$PART_TIMEOUT" "$@" 2>>"$LOG")
    rc=$?
    out=$(printf '%s\n' "$out" | grep '^{')
    if [ -n "$out" ]; then
        printf '%s\n' "$out" | sed "s/^{/{\"part\": \"$name\", \"run\": \"$RUN\", \"rc\": $rc, /" >>"$J"
    else
        echo "{\"part\": \"$name\", \"run\": \"$RUN\", \"rc\": $rc, \"error\": \"no JSON (exit status $rc; see gpt2.log)\", \"batch\": $B}" >>"$J"
    fi
}

echo "{\"part\": \"meta\", \"run\": \"$RUN\", \"gpu\": \"$GPU\", \"batch\": $B, \"block\": $T, \"steps\": $STEPS, \"warmup\": $WARMUP, \"fused\": $FUSED, \"parts\": \"$PARTS\"}" >>"$J"
if has headroom; then
    part headroom "${HR[@]}" $M "$B" "$STEPS" "$WARMUP" cuda --precision bf16 --optim adamw
fi
if has torch; then
    part torch "${TG[@]}" --batch "$B" --steps "$STEPS" --warmup "$WARMUP"
fi
if has compile; then
    part compile "${TG[@]}" --batch "$B" --steps "$STEPS" --warmup "$WARMUP" --compile
fi
if has largest; then
    part largest "${HR[@]}" --largest $M "$B" cuda --precision bf16 --optim adamw
    part largest "${TG[@]}" --largest
fi

$PY - "$J" "$RUN" "$GPU" <<'EOF'
import json, sys
run, gpu = sys.argv[2], sys.argv[3]
rows = [r for r in (json.loads(l) for l in open(sys.argv[1]) if l.strip()) if r.get("run") == run]
mib = lambda v: "%.0f MiB" % (v / 2**20) if isinstance(v, (int, float)) and v else "-"
print("GPT-2 124M, context 1024, bf16, AdamW, on %s (this run: %s)" % (gpu or "an unnamed GPU", run))
print("%-16s %6s %10s %11s %8s %18s %12s" % ("", "batch", "step ms", "tokens/s", "vs hr", "memory", "NVML peak"))
base = None
for r in rows:
    p = r.get("part")
    if p not in ("headroom", "torch", "compile"):
        continue
    name = "headroom" if p == "headroom" else r.get("impl", p)
    if "error" in r:
        print("%-16s %6s  %s" % (name, r.get("batch", "-"), r["error"]))
        continue
    ms = r.get("median_ms", r.get("median_step_ms"))
    tps = r.get("tokens_per_s") or (r.get("samples_per_s", 0) * 1024)
    if p == "headroom":
        base = tps
        mem = "planned " + mib(r.get("job_total"))
    else:
        mem = "reserved " + mib(r.get("max_reserved"))
    rel = "%.2fx" % (tps / base) if base else "-"
    print("%-16s %6s %10.2f %11.0f %8s %18s %12s" % (name, r.get("batch"), ms, tps, rel, mem, mib(r.get("nvml_peak"))))
for r in rows:
    if r.get("part") != "largest":
        continue
    if "error" in r:
        print("largest: %s" % r["error"])
    elif r.get("impl") == "headroom":
        print("headroom largest micro-batch: %s confirmed by a step (planned %s, in %d attempts)"
              % (r.get("largest_confirmed"), r.get("largest_planned"), len(r.get("attempts", []))))
    else:
        print("%s largest micro-batch: %s (%d probes, %.0f s)"
              % (r.get("impl"), r.get("largest"), len(r.get("probes", [])), r.get("search_s", 0)))
EOF
