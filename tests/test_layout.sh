#!/usr/bin/env bash
# test_layout.sh — the source layout's promises, checked from the files:
# every #include under src/ looks down the layers (none up, so no cycles),
# an op lives in at most 5 files under src/ and include/, and no text file
# under src/, include/ or tests/ (but tests/golden/) passes 800 lines. Run
# from the repository root; prints check.h's lines.
set -u
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

# The layers, lowest first; a file may include its own layer's headers and
# lower ones. data/ needs only core/; backend/cpu and backend/cuda are one
# layer (backend), and neither includes the other.
layers=(core graph ops plan backend exec data io cli)
rank() {
    local i
    for i in "${!layers[@]}"; do [ "${layers[$i]}" = "$1" ] && echo "$i" && return; done
    echo -1
}
while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${line#*:}")
    [ "$inc" = headroom.h ] && { ok; continue; }
    from=$(cut -d/ -f2 <<<"$file")
    to=${inc%%/*}
    [ "$to" = "$inc" ] && { ok; continue; } # same folder, plain name
    rf=$(rank "$from")
    rt=$(rank "$to")
    if [ "$rt" -lt 0 ] || [ "$rf" -lt 0 ]; then
        bad "layers: $file includes $inc, outside the known layers (${layers[*]})"
    elif [ "$rt" -gt "$rf" ]; then
        bad "layers: $file ($from) includes $inc ($to), a higher layer"
    elif [ "$from" = backend ] && [[ $file == src/backend/cuda/* ]] && [[ $inc == backend/cpu/* ]]; then
        bad "layers: $file includes the CPU backend's $inc"
    else
        ok
    fi
done < <(grep -rn '^#include "' src --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' | sed -E 's/:[0-9]+:/:/')

# One op, one place: its descriptor, its CPU and CUDA kernel files, the
# public header and the op list. src/ops/blocks.c is not counted: it builds
# PyTorch's composite modules from the public builders, as a model file does.
for op in avgpool dropout maxpool batchnorm concat gelu layernorm; do
    files=$(grep -ril "$op" src include | grep -v '^src/ops/blocks\.c$')
    n=$(wc -l <<<"$files")
    if [ "$n" -le 5 ]; then ok; else bad "files per op: $op is in $n files: $(tr '\n' ' ' <<<"$files")"; fi
done

# (grep -I: binary files, which have no lines to speak of, are left out)
while IFS= read -r f; do
    grep -Iq . "$f" || continue
    n=$(wc -l <"$f")
    if [ "$n" -le 800 ]; then ok; else bad "size: $f has $n lines (at most 800)"; fi
done < <(find src include tests -type f -not -path 'tests/golden/*')

echo "RESULT test_layout $pass $fail"
[ "$fail" -eq 0 ]
