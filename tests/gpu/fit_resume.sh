#!/usr/bin/env bash
# fit_resume.sh — starts that fit whatever memory is free: a `train --fit`
# run starts on a free GPU and stops after one epoch; a second process then
# holds most of the GPU; the same run resumed with --fit re-fits to what is
# left (more micro-batches, or recomputation), says what changed, and
# finishes with the same effective batch and the same number of optimizer
# steps as a run that was never interrupted.
# Prints "RESULT tests/gpu/fit_resume.sh PASS FAIL". Run from the repo root.
set -u
HR=${HR:-${BUILD:-build}/headroom}
pass=0 fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2"; fi; }
tmp=$(mktemp -d)
export HR_CACHE_DIR=$tmp/cache
m=examples/simple_cnn.model
# two steps an epoch of 65536 samples: an arena of about 6 GB in one pass
common="--data synthetic --samples 131072 --batch 65536 --device cuda --seed 5"

$HR train $m $common --epochs 2 --save "$tmp/ref.ckpt" >"$tmp/ref.log" 2>&1
check '[ $? -eq 0 ]' "an uninterrupted run ($(tail -2 "$tmp/ref.log"))"
$HR train $m $common --fit --epochs 1 --save "$tmp/run.ckpt" >"$tmp/first.log" 2>&1
check '[ $? -eq 0 ] && [ -s "$tmp/run.ckpt" ]' "a first --fit run writes a checkpoint ($(tail -2 "$tmp/first.log"))"
check 'grep -q "^fit: batch 65536 as .*fp32.*(free now)" "$tmp/first.log"' \
    "on a free GPU, fit's choice within what is free ($(grep '^fit' "$tmp/first.log"))"

# the other process: everything but 3 GiB of what is free
python3 - "$tmp/ready" <<'PY' &
import sys, time, torch
free, _ = torch.cuda.mem_get_info()
hold = torch.empty(free - (3 << 30), dtype=torch.uint8, device="cuda")
open(sys.argv[1], "w").close()
time.sleep(120)
PY
holder=$!
for _ in $(seq 1 300); do [ -e "$tmp/ready" ] && break; sleep 0.1; done
check '[ -e "$tmp/ready" ]' "the holding process took the memory"

# without --fit the resumed run no longer fits (exit 3); with it, it trains
$HR train $m $common --epochs 2 --resume "$tmp/run.ckpt" >"$tmp/nofit.log" 2>&1
rc=$?
check '[ $rc -eq 3 ]' "without --fit (one pass of 65536): does not fit (got $rc: $(grep -m1 'does not fit\|headroom' "$tmp/nofit.log"))"
$HR train $m $common --fit --epochs 2 --resume "$tmp/run.ckpt" --save "$tmp/run.ckpt" >"$tmp/resume.log" 2>&1
rc=$?
check '[ $rc -eq 0 ]' "resumed with --fit (got $rc: $(tail -3 "$tmp/resume.log"))"
fitline=$(grep '^fit' "$tmp/resume.log")
check 'echo "$fitline" | grep -q "batch 65536 as"' "the resumed run re-fits: $fitline"
first=$(grep '^fit' "$tmp/first.log" | sed 's/: [0-9.]* [GMK]iB of.*//')
check '[ "$(echo "$fitline" | sed "s/: [0-9.]* [GMK]iB of.*//; s/^fit ([^)]*)/fit/")" != "$first" ]' \
    "... to another choice than at the start ($first)"
check 'grep -q "fp32" <<<"$fitline"' "the precision stays fp32 (never changed silently)"
kill $holder 2>/dev/null
wait $holder 2>/dev/null

# both runs end after 2 epochs of 2 steps, at batch 65536
for r in ref run; do
    $HR train $m $common --epochs 2 --resume "$tmp/$r.ckpt" >"$tmp/$r.check" 2>&1
done
step_of() { sed -n 's/.*resumed from .*step \([0-9]*\).*/\1/p' "$1" | head -1; }
check '[ "$(step_of "$tmp/ref.check")" = 4 ] && [ "$(step_of "$tmp/run.check")" = 4 ]' \
    "4 optimizer steps each (uninterrupted $(step_of "$tmp/ref.check"), re-fitted $(step_of "$tmp/run.check"))"
check 'grep -q "batch_size\|nothing to train" "$tmp/run.check"' "the re-fitted run is finished"
sed -n '/^fit/p;/resumed/p;/accumulation/p' "$tmp/first.log" "$tmp/resume.log"
rm -rf "$tmp"
echo "RESULT tests/gpu/fit_resume.sh $pass $fail"
[ $fail -eq 0 ]
