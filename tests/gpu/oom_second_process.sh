#!/usr/bin/env bash
# oom_second_process.sh — the OOM path forced by another process: PyTorch
# holds most of the GPU, then `headroom train` must refuse a plan that no
# longer fits (exit 3, the category table, the largest batch), allocate
# nothing, and leave the checkpoint it resumed from untouched.
# Prints "RESULT tests/gpu/oom_second_process.sh PASS FAIL". Run from the repo root.
set -u
HR=${HR:-${BUILD:-build}/headroom}
pass=0 fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2"; fi; }
tmp=$(mktemp -d)
m=examples/simple_cnn.model
# a batch whose arena (~6 GB) fits the whole GPU but not the 2 GiB left below
common="--data synthetic --samples 70000 --batch 65536 --device cuda --seed 3 -q"

$HR train $m $common --epochs 1 --save "$tmp/good.ckpt" >"$tmp/first.log" 2>&1
check '[ $? -eq 0 ] && [ -s "$tmp/good.ckpt" ]' "a first run writes a checkpoint ($(tail -2 "$tmp/first.log"))"
cp "$tmp/good.ckpt" "$tmp/good.copy"

# the other process: everything but 2 GiB of what is free (room for our context)
python3 - "$tmp/ready" <<'PY' &
import sys, time, torch
free, _ = torch.cuda.mem_get_info()
hold = torch.empty(free - (2 << 30), dtype=torch.uint8, device="cuda")
open(sys.argv[1], "w").close()
time.sleep(60)
PY
holder=$!
for _ in $(seq 1 300); do [ -e "$tmp/ready" ] && break; sleep 0.1; done
check '[ -e "$tmp/ready" ]' "the holding process took the memory"

$HR train $m $common --epochs 3 --resume "$tmp/good.ckpt" --save "$tmp/good.ckpt" >"$tmp/oom.log" 2>&1
rc=$?
check '[ $rc -eq 3 ]' "exit status 3 when the plan does not fit (got $rc: $(tail -3 "$tmp/oom.log"))"
check 'grep -q "does not fit" "$tmp/oom.log"' "the message says it does not fit"
check 'grep -q "largest batch that fits" "$tmp/oom.log"' "the message gives the largest batch"
check 'grep -q "saved activations" "$tmp/oom.log"' "the message has the category table"
check 'cmp -s "$tmp/good.ckpt" "$tmp/good.copy"' "the checkpoint is untouched"
kill $holder 2>/dev/null; wait $holder 2>/dev/null
sed -n 1,14p "$tmp/oom.log"
rm -rf "$tmp"
echo "RESULT tests/gpu/oom_second_process.sh $pass $fail"
[ $fail -eq 0 ]
