#!/usr/bin/env bash
# llmc_bench.sh — llm.c's GPT-2 124M trainer (train_gpt2cu) on this GPU, to set
# next to headroom: GPT-2 124M from scratch (-e d12), bf16, context T, micro-batch
# B, total batch B*T (no gradient accumulation), STEPS steps, no evaluation,
# sampling or checkpoints in between, recompute setting R (-r: 0 none, 1 GELU,
# 2 GELU+layernorm; llm.c's default is 1). Build first with bench/llmc_build.sh
# (any machine with nvcc); run from anywhere on the GPU machine.
#
# Env (BIN, B and R may be lists, each combination is one run):
#   BIN      build/llmc/train_gpt2cu (llm.c's attention) and/or
#            build/llmc/train_gpt2cu_cudnn (cuDNN flash attention)   [train_gpt2cu]
#   B T R    micro-batch, context, recompute                         [16 1024 1]
#   STEPS    training steps per run                                   [30]
#   WARMUP   first steps left out of the medians                      [5]
#   LARGEST  1: instead, find the largest B that trains, per BIN and R:
#            doubling from BSTART [1], then bisection, each probe
#            PROBE_STEPS steps [3]; a probe fits when it exits 0 after all
#            its steps; up to BMAX [1024]. A probe costs ~10-30 s (start,
#            cuDNN/cuBLAS setup), a search ~10 probes.
#   TEXT     the text to train on [.data/fortunes.txt, made from
#            /usr/share/games/fortunes when missing]
#   RES      where everything goes [$OUT if set, else bench/results]
# Output: one JSON line per run (and per LARGEST search) in $RES/llmc.jsonl,
# every llm.c output and error in $RES/llmc.log, a table last. Token files live
# in a temporary folder, removed at exit.
#
# What llm.c prints, and what is taken from it: per step
#   "step %4d/%d | loss ... | lr ... | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s"
# where ms is the step's GPU time (cudaEvents around forward+backward+update)
# and tok/s is a bias-corrected moving average over steps 2.. — so the medians
# here come from ms (tok/s = B*T / ms); llm.c's last average goes along as
# llmc_ema_tok_s. After allocating it prints "device memory usage: U MiB / TOT
# MiB" (cudaMemGetInfo, the whole card), "memory per sequence: S MiB" and
# " -> estimated maximum batch size: N": these go along as llmc_mem_used_mib,
# llmc_mem_per_seq_mib, llmc_est_max_B, with its "allocat... N MiB for X" lines
# in llmc_alloc_mib.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-python3}
RES=${RES:-${OUT:-bench/results}}
BIN=${BIN:-build/llmc/train_gpt2cu}
B=${B:-16}
T=${T:-1024}
R=${R:-1}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
LARGEST=${LARGEST:-0}
PROBE_STEPS=${PROBE_STEPS:-3}
BMAX=${BMAX:-1024}
BSTART=${BSTART:-1}
TEXT=${TEXT:-.data/fortunes.txt}
mkdir -p "$RES"
J=$RES/llmc.jsonl
LOG=$RES/llmc.log
touch "$J" "$LOG"
say() { echo "$*"; echo "== $*" >>"$LOG"; }

# the binaries link libcublasLt.so.13 (and libcudnn.so.9) dynamically
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    [ -d "$d" ] && LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
for b in $BIN; do
    [ -x "$b" ] || { echo "llmc_bench: no binary $b (bench/llmc_build.sh builds it)" >&2; exit 1; }
    if ldd "$b" 2>/dev/null | grep -q "not found"; then
        echo "llmc_bench: $b misses libraries:" >&2; ldd "$b" | grep "not found" >&2; exit 1
    fi
done
if [ ! -f "$TEXT" ]; then
    [ -d /usr/share/games/fortunes ] || { echo "llmc_bench: no $TEXT and no fortunes to make it from" >&2; exit 1; }
    mkdir -p "$(dirname "$TEXT")"
    for f in $(ls /usr/share/games/fortunes | LC_ALL=C sort); do
        case "$f" in *.dat | *.u8) continue ;; esac
        [ -f "/usr/share/games/fortunes/$f" ] && cat "/usr/share/games/fortunes/$f"
    done >"$TEXT"
fi

# token files: llm.c needs at least B*T+1 tokens in each (train and val)
bmax_used=0
if [ "$LARGEST" = 1 ]; then bmax_used=$BMAX; else for b in $B; do [ "$b" -gt "$bmax_used" ] && bmax_used=$b; done; fi
TOK=$(mktemp -d "${TMPDIR:-/tmp}/llmc_tokens.XXXXXX")
trap 'rm -rf "$TOK"' EXIT
$PY bench/make_tokens.py "$TEXT" "$TOK/train.bin" "$TOK/val.bin" --val-fraction 0.1 \
    --min-tokens $((bmax_used * T + 1)) 2>>"$LOG" || { echo "llmc_bench: make_tokens failed" >&2; exit 1; }

impl_of() { case "$(basename "$1")" in *cudnn*) echo "llm.c+cudnn" ;; *) echo "llm.c" ;; esac; }

# sample NVML every 0.2 s while PID lives: "this pid's MiB, all compute apps' MiB,
# the card's used MiB" per line (the pid may not show inside a container: then
# the other two columns tell)
sample_mem() { # PID FILE
    local pid=$1 f=$2
    command -v nvidia-smi >/dev/null || return 0
    while kill -0 "$pid" 2>/dev/null; do
        apps=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null)
        card=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null)
        echo "$apps" | awk -F', *' -v p="$pid" -v c="${card:-0}" \
            '$1 == p {own += $2} NF >= 2 {all += $2} END {print own + 0, all + 0, c + 0}' >>"$f"
        sleep 0.2
    done
}

# run_llmc BIN B R STEPS PART: one run of llm.c; its output goes to $LOG, one
# JSON line to $J; sets RC and STATUS (ok, oom, error)
run_llmc() {
    local bin=$1 b=$2 r=$3 steps=$4 part=$5
    local out=$TOK/run.out mem=$TOK/run.mem
    : >"$out"; : >"$mem"
    local args=(-e d12 -i "$TOK/train.bin" -j "$TOK/val.bin" -t "$T" -b "$b" -d $((b * T)) -x "$steps" -r "$r"
        -v 1000000000 -m 1 -s 0 -n 0 -h 0)
    # -v: val loss only at step 0 and after the last step (llm.c always does those
    # two), on -m 1 batch, outside the timed steps; -s 0: no sampling; -n 0 and
    # no -o: no checkpoints, no log dir; -h 0: no HellaSwag
    echo "== $part $(impl_of "$bin") B=$b T=$T R=$r steps=$steps: $bin ${args[*]}" >>"$LOG"
    "$bin" "${args[@]}" >"$out" 2>&1 &
    local pid=$!
    sample_mem "$pid" "$mem" &
    local spid=$!
    wait "$pid"
    RC=$?
    wait "$spid" 2>/dev/null
    cat "$out" >>"$LOG"
    echo "== exit $RC" >>"$LOG"
    STATUS=$($PY - "$out" "$mem" "$J" "$part" "$(impl_of "$bin")" "$bin" "$b" "$T" "$r" "$steps" "$WARMUP" "$RC" <<'EOF'
import json, re, statistics, sys
out, mem, jpath, part, impl, binp = sys.argv[1:7]
B, T, R, steps, warmup, rc = map(int, sys.argv[7:13])
text = open(out, errors="replace").read()
step_re = re.compile(r"^step\s+(\d+)/(\d+) \| loss (\S+) .*?\| ([\d.]+) ms \| (-?[\d.]+)% \w+ MFU \| ([\d.]+) tok/s", re.M)
rows = [(int(m[1]), float(m[3]) if m[3] not in ("nan", "-nan") else None, float(m[4]), float(m[5]), float(m[6]))
        for m in step_re.finditer(text)]
timed = [x for x in rows if x[0] > warmup] or rows[1:] or rows
ms = [x[2] for x in timed]
def grab(pat, conv=int):
    m = re.search(pat, text, re.M)
    return conv(m[1]) if m else None
alloc = {m[2].strip(): int(m[1]) for m in re.finditer(r"^allocat(?:ing|ed) (\d+) MiB for (.+)$", text, re.M)}
oom = rc != 0 and bool(re.search(r"\[LLMC OOM\]|out of memory|ALLOC_FAILED|CUBLAS_STATUS_ALLOC", text, re.I))
status = "ok" if rc == 0 and len(rows) == steps else ("oom" if oom else "error")
peak = None
try:
    cols = [tuple(map(int, l.split())) for l in open(mem) if l.strip()]
    if cols:
        peak = [max(c[i] for c in cols) for i in range(3)]
except (OSError, ValueError):
    pass
err = None
if status != "ok":
    ls = text.splitlines()
    hits = [i for i, l in enumerate(ls) if re.search(r"ERROR|OOM|error|Assertion|failed", l)]
    if hits:  # llm.c's "[CUDA ERROR] at file F:L:" has its message on the next line
        i = hits[0]
        err = ls[i] + (" " + ls[i + 1] if ls[i].endswith(":") and i + 1 < len(ls) else "")
    else:
        err = (ls or ["(no output)"])[-1]
    err = err[:300]
rec = {
    "part": part, "impl": impl, "bin": binp, "B": B, "T": T, "R": R, "steps": steps,
    "rc": rc, "status": status, "steps_done": len(rows), "warmup": warmup,
    "median_tok_s": round(statistics.median(B * T * 1000.0 / x for x in ms), 1) if ms else None,
    "median_step_ms": round(statistics.median(ms), 3) if ms else None,
    "min_step_ms": round(min(ms), 3) if ms else None,
    "median_mfu_pct": round(statistics.median(x[3] for x in timed), 2) if timed else None,
    "llmc_ema_tok_s": rows[-1][4] if rows else None,
    "first_loss": rows[0][1] if rows else None, "last_loss": rows[-1][1] if rows else None,
    "nvml_peak_mib": peak[0] if peak else None,
    "nvml_peak_all_apps_mib": peak[1] if peak else None,
    "nvml_peak_card_used_mib": peak[2] if peak else None,
    "llmc_mem_used_mib": grab(r"^device memory usage: (\d+) MiB"),
    "llmc_mem_total_mib": grab(r"^device memory usage: \d+ MiB / (\d+) MiB"),
    "llmc_mem_per_seq_mib": grab(r"^memory per sequence: (\d+) MiB"),
    "llmc_est_max_B": grab(r"estimated maximum batch size: (\d+)"),
    "llmc_alloc_mib": alloc or None,
    "llmc_avg_iter_ms": grab(r"^total average iteration time: ([\d.]+) ms", float),
    "device": grab(r"^\| device\s+\| (.+?)\s+\|$", str),
    "error": err,
}
with open(jpath, "a") as f:
    f.write(json.dumps(rec) + "\n")
print(status)
EOF
)
    [ -n "$STATUS" ] || STATUS=error
}

if [ "$LARGEST" = 1 ]; then
    for bin in $BIN; do
        for r in $R; do
            say "largest B: $(impl_of "$bin") T=$T R=$r (probes of $PROBE_STEPS steps, up to $BMAX)"
            fits() { # B -> 0 when it trains
                run_llmc "$bin" "$1" "$r" "$PROBE_STEPS" probe
                say "  B=$1: $STATUS (exit $RC)"
                probes="$probes $1:$STATUS"
                [ "$STATUS" = ok ]
            }
            probes="" lo=0 hi=0 b=$BSTART
            while [ "$b" -le "$BMAX" ]; do
                if fits "$b"; then lo=$b; b=$((b * 2)); else hi=$b; break; fi
            done
            [ "$hi" = 0 ] && [ "$lo" -lt "$BMAX" ] && { fits "$BMAX" && lo=$BMAX || hi=$BMAX; }
            if [ "$hi" -gt 0 ]; then
                while [ $((hi - lo)) -gt 1 ]; do
                    mid=$(((lo + hi) / 2))
                    if fits "$mid"; then lo=$mid; else hi=$mid; fi
                done
            fi
            echo "{\"part\": \"largest\", \"impl\": \"$(impl_of "$bin")\", \"bin\": \"$bin\", \"T\": $T, \"R\": $r, \"largest_B\": $lo, \"first_failing_B\": $([ "$hi" -gt 0 ] && echo "$hi" || echo null), \"bmax\": $BMAX, \"probe_steps\": $PROBE_STEPS, \"probes\": \"${probes# }\"}" >>"$J"
            say "largest B: $(impl_of "$bin") T=$T R=$r -> $lo"
        done
    done
else
    for bin in $BIN; do
        for r in $R; do
            for b in $B; do
                run_llmc "$bin" "$b" "$r" "$STEPS" run
                say "$(impl_of "$bin") B=$b T=$T R=$r: $STATUS (exit $RC)"
            done
        done
    done
fi

$PY - "$J" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def f(v, fmt):
    return "-" if v is None else fmt % v
if any(r.get("part") == "run" for r in rows):
    print("%-12s %5s %5s %2s %5s %-6s %10s %9s %9s %9s %8s %6s" % (
        "impl", "B", "T", "R", "steps", "status", "tok/s", "step ms", "NVML MiB", "card MiB", "llmc MiB", "estB"))
for r in rows:
    if r.get("part") == "run":
        print("%-12s %5d %5d %2d %5d %-6s %10s %9s %9s %9s %8s %6s" % (
            r["impl"], r["B"], r["T"], r["R"], r["steps"], r["status"], f(r["median_tok_s"], "%.0f"),
            f(r["median_step_ms"], "%.2f"), f(r["nvml_peak_mib"], "%d"), f(r["nvml_peak_card_used_mib"], "%d"),
            f(r["llmc_mem_used_mib"], "%d"), f(r["llmc_est_max_B"], "%d")))
for r in rows:
    if r.get("part") == "largest":
        print("largest B: %-12s T=%d R=%d -> %d (first failing: %s; probes %s)" % (
            r["impl"], r["T"], r["R"], r["largest_B"], r["first_failing_B"], r["probes"]))
EOF
