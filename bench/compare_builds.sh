#!/usr/bin/env bash
# compare_builds.sh — the seed models' step time from two builds of headroom
# in the same call, alternating (A B A B ...) so that the machine's drift
# hits both alike: bench_step's median of each run, then the median over
# rounds and the ratio B/A. For a refactor that must not slow anything down.
#
#     bash bench/compare_builds.sh BUILD_A BUILD_B [rounds=5] [cuda|cpu]
#
# Each BUILD holds bench/bench_step. One JSON line a run in $RES/compare.jsonl
# (RES defaults to $OUT, else bench/results); the table is printed last.
set -u
cd "$(dirname "$0")/.."
A=${1:?build A}
B=${2:?build B}
ROUNDS=${3:-5}
DEV=${4:-cuda}
STEPS=${STEPS:-100}
WARM=${WARM:-10}
RES=${RES:-${OUT:-bench/results}}
mkdir -p "$RES"
J=$RES/compare.jsonl
: >"$J"
export NCCL_NVLS_ENABLE=0
if ! ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so\.9 '; then
    d=$(python3 -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
    [ -n "$d" ] && [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
models="mlp:1024 simple_cnn:128 deep_cnn:64"
for r in $(seq "$ROUNDS"); do
    for mb in $models; do
        m=${mb%%:*} b=${mb##*:}
        for which in A B; do
            dir=$A
            [ $which = B ] && dir=$B
            line=$(timeout 120 "$dir/bench/bench_step" "examples/$m.model" "$b" "$STEPS" "$WARM" "$DEV" 2>/dev/null | tail -1)
            echo "{\"build\": \"$which\", \"round\": $r, \"model\": \"$m\", \"run\": ${line:-null}}" >>"$J"
        done
    done
done
python3 - "$J" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'model':12s} {'A median ms':>12s} {'B median ms':>12s} {'B/A':>6s}  per-round B/A")
for m in ["mlp", "simple_cnn", "deep_cnn"]:
    t = {w: [r["run"]["median_ms"] for r in rows if r["model"] == m and r["build"] == w and r["run"]] for w in "AB"}
    if not t["A"] or not t["B"]:
        print(f"{m:12s} missing runs"); continue
    a, b = statistics.median(t["A"]), statistics.median(t["B"])
    per = " ".join(f"{y / x:.3f}" for x, y in zip(t["A"], t["B"]))
    print(f"{m:12s} {a:12.4f} {b:12.4f} {b / a:6.3f}  {per}")
PY
