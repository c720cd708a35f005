#!/usr/bin/env bash
# gpt_bench.sh — the character GPT (examples/char_gpt.model: 6 layers, 6 heads,
# 384 wide, context 256, batch 64) on this GPU, headroom and PyTorch 2 in the
# same call, PREC=fp32 (default; TF32 off on both sides) or PREC=bf16
# (headroom's --precision bf16, PyTorch's autocast), AdamW(1e-3), the fortunes text:
#   step   headroom's median step (bench/bench_step: random ids, 20 steps after 5)
#   train  STEPS steps of `headroom train` from scratch (no validation while it
#          trains), then the validation loss (`headroom eval`): the wall time of
#          both, as PyTorch's run validates once at its end; and the same
#          checkpoint's validation loss in PyTorch (loaded with strict=True:
#          bench/torch_gpt.py --check)
#   torch  the same STEPS in PyTorch eager and torch.compile (bench/torch_gpt.py)
# Build first (make all, any machine with nvcc); the text is .data/fortunes.txt
# (made here from /usr/share/games/fortunes when missing: the same bytes as
# --data fortunes; .data/ is git-ignored, and the GPU machine has no fortunes
# package: make it here and carry .data there). SEEDS="1 2 3" repeats train and torch once a seed (each
# side's initial weights and batch order; default: seed 0), COMPILE=0 leaves
# torch.compile out; the table then gives each side's mean validation loss.
# One JSON line per measurement in $RES/gpt.jsonl (RES: $OUT on the device
# machine, else bench/results), a table last.
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
BUILD=${BUILD:-build}
PY=${PY:-python3}
RES=${RES:-${OUT:-bench/results}}
STEPS=${STEPS:-300}
PREC=${PREC:-fp32}
TEXT=${TEXT:-.data/fortunes.txt}
PARTS=${PARTS:-"step train torch"}
SEEDS=${SEEDS:-0}
COMPILE=${COMPILE:-1}
RUN=$(date -u +%Y-%m-%dT%H:%M:%SZ)
mkdir -p "$RES"
J=$RES/gpt.jsonl
LOG=$RES/gpt.log
touch "$J" "$LOG"
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
if [ ! -f "$TEXT" ]; then
    [ -d /usr/share/games/fortunes ] || { echo "gpt_bench: no $TEXT and no fortunes to make it from" >&2; exit 1; }
    mkdir -p "$(dirname "$TEXT")"
    for f in $(ls /usr/share/games/fortunes | LC_ALL=C sort); do
        case "$f" in *.dat | *.u8) continue ;; esac
        [ -f "/usr/share/games/fortunes/$f" ] && cat "/usr/share/games/fortunes/$f"
    done >"$TEXT"
fi
M=examples/char_gpt.model
now() { date +%s.%N; }

if has step; then
    "$BUILD/bench/bench_step" $M 64 20 5 cuda --precision "$PREC" --optim adamw 2>>"$LOG" |
        sed 's/^{/{"part": "step", /' >>"$J"
fi
for SEED in $SEEDS; do
if has train; then
    t0=$(now)
    # one validation pass, at the end, as torch_gpt.py's run: none while
    # training (--eval-batch 0; train's default scores every epoch), then
    # headroom eval, inside the wall time
    "$BUILD/headroom" train $M --data "text:$TEXT" --batch 64 --optim adamw --lr 1e-3 --max-steps "$STEPS" --precision "$PREC" \
        --seed "$SEED" --save "$RES/char_gpt.ckpt" --device cuda --memory-stats --eval-batch 0 >"$RES/train.log" 2>&1
    rc=$?
    vl=$("$BUILD/headroom" eval $M --weights "$RES/char_gpt.ckpt" --data "text:$TEXT" --device cuda -q 2>>"$LOG" |
        sed -n 's/^val loss \([0-9.]*\).*/\1/p')
    t1=$(now)
    tl=$($PY bench/torch_gpt.py --text "$TEXT" --check "$RES/char_gpt.ckpt" 2>>"$LOG" | sed -n 's/.*"val_loss": \([0-9.]*\).*/\1/p')
    total=$(sed -n 's/.*device total *\([0-9.]* [KMG]iB\).*/\1/p' "$RES/train.log" | head -1)
    nvml=$(sed -n 's/.*NVML (this process).*peak \([0-9.]* [KMG]iB\).*/\1/p' "$RES/train.log" | head -1)
    echo "{\"part\": \"train\", \"run\": \"$RUN\", \"seed\": $SEED, \"impl\": \"headroom\", \"precision\": \"$PREC\", \"rc\": $rc, \"steps\": $STEPS, \"wall_s\": $(awk "BEGIN {print $t1 - $t0}"), \"val_loss\": \"${vl}\", \"torch_val_loss_of_ckpt\": \"${tl}\", \"device_total\": \"${total}\", \"nvml_peak\": \"${nvml}\"}" >>"$J"
    rm -f "$RES/char_gpt.ckpt"
fi
if has torch; then
    $PY bench/torch_gpt.py --text "$TEXT" --steps "$STEPS" --precision "$PREC" --seed "$SEED" 2>>"$LOG" |
        sed "s/^{/{\"part\": \"torch\", \"run\": \"$RUN\", \"seed\": $SEED, /" >>"$J"
    if [ "$COMPILE" = 1 ]; then
        $PY bench/torch_gpt.py --text "$TEXT" --steps "$STEPS" --precision "$PREC" --seed "$SEED" --compile 2>>"$LOG" |
            sed "s/^{/{\"part\": \"torch\", \"run\": \"$RUN\", \"seed\": $SEED, /" >>"$J"
    fi
fi
done
$PY - "$J" "$RUN" <<'EOF'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r.get("run") == sys.argv[2] or r.get("part") == "step"]
for r in rows:
    if r.get("part") == "step":
        print("headroom step: median %.2f ms (batch %s, %s)" % (r.get("median_ms", 0), r.get("batch"), r.get("precision")))
    elif r.get("part") == "train":
        print("headroom train (%s, seed %s): %s steps in %.1f s, val loss %s (PyTorch on the same checkpoint: %s), device total %s, NVML peak %s"
              % (r.get("precision"), r.get("seed", 0), r["steps"], float(r["wall_s"]), r["val_loss"], r["torch_val_loss_of_ckpt"], r["device_total"], r["nvml_peak"]))
    elif r.get("part") == "torch":
        print("%s (%s, seed %s): %s steps in %.1f s, val loss %.4f, median step %.2f ms, max reserved %.0f MiB"
              % (r["impl"], r.get("precision", "fp32"), r.get("seed", 0), r["steps"], r["wall_s"], r["val_loss"], r["median_step_ms"], (r["max_reserved"] or 0) / 2**20))
by = {}
for r in rows:
    if r.get("part") in ("train", "torch") and r.get("val_loss") not in (None, ""):
        by.setdefault(r.get("impl", "?"), []).append(float(r["val_loss"]))
for k, v in by.items():
    sd = statistics.stdev(v) if len(v) > 1 else 0.0
    print("%-16s validation loss over %d seed(s): mean %.4f, sd %.4f, range %.4f-%.4f" % (k, len(v), statistics.mean(v), sd, min(v), max(v)))
EOF
