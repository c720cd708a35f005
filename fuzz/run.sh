#!/usr/bin/env bash
# run.sh — builds the libFuzzer targets in fuzz/ with ASan and UBSan and runs
# each for N seconds (default 10) from its seed corpus: `fuzz/run.sh [N] [target]`.
# Targets: modelfile, safetensors, idx (see docs/fuzzing.md to add one).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-10}
ONLY=${2:-}
OUT=${FUZZ_OUT:-build/fuzz}
CC=${FUZZ_CC:-clang}
mkdir -p "$OUT"

# The library is compiled once with the same instrumentation into an archive;
# the linker takes only the objects a target needs. CPU only: no CUDA.
shopt -s nullglob
LIB_SRC=(src/core/*.c src/graph/*.c src/ops/*.c src/plan/*.c src/exec/*.c src/backend/*.c
         src/backend/cpu/*.c src/data/*.c src/io/*.c)
FLAGS="-g -O1 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -pthread -fsanitize=address,undefined -fno-sanitize-recover=undefined"
LIBS="-lopenblas -lz -lm -pthread -ldl"

build_lib() {
    echo "building $OUT/libheadroom_fuzz.a"
    mkdir -p "$OUT/obj"
    rm -f "$OUT/libheadroom_fuzz.a" "$OUT"/obj/*.o
    for f in "${LIB_SRC[@]}"; do
        $CC $FLAGS -fsanitize=fuzzer-no-link -c "$f" -o "$OUT/obj/$(echo "$f" | tr / _).o" &
        while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do sleep 0.1; done
    done
    wait
    ar rcs "$OUT/libheadroom_fuzz.a" "$OUT"/obj/*.o
}

# Seed corpora: the example models; a few small safetensors files written here
# (python3 with only json+struct, as the reference layout) when none exist.
seed_safetensors() {
    local dir=$1
    [ -n "$(ls -A "$dir" 2>/dev/null)" ] && return
    command -v python3 >/dev/null || { echo "no python3: fuzz_safetensors starts without seeds"; return; }
    python3 - "$dir" <<'PY'
import json, struct, sys
def write(path, tensors, meta=None):
    hdr, off, blob = {}, 0, b''
    if meta: hdr['__metadata__'] = meta
    for name, (dt, shape, data) in tensors.items():
        hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(data)]}
        off += len(data); blob += data
    h = json.dumps(hdr).encode(); h += b' ' * ((8 - len(h) % 8) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(h)) + h + blob)
d = sys.argv[1]
write(d + '/small.safetensors', {'0.weight': ('F32', [2, 3], struct.pack('<6f', *range(6))),
                                 '0.bias': ('F32', [2], struct.pack('<2f', 1, 2)),
                                 'optim.0.weight.exp_avg': ('F16', [2, 3], struct.pack('<6e', *range(6))),
                                 'n': ('I64', [], struct.pack('<q', 3))},
      {'format': 'pt', 'headroom.step': '3'})
write(d + '/empty.safetensors', {})
write(d + '/bf16.safetensors', {'w': ('BF16', [1, 2], b'\xc0\x3f\x20\xc1'), 'u': ('U8', [0], b'')})
PY
}

build() { # name
    echo "building $OUT/$1"
    $CC $FLAGS -fsanitize=fuzzer -o "$OUT/$1" "fuzz/$1.c" "$OUT/libheadroom_fuzz.a" $LIBS
}

run() { # name, corpus dir, seed dir
    local corpus="$OUT/corpus_$1"
    mkdir -p "$corpus"
    echo "fuzzing $1 for ${SECONDS_EACH}s (corpus $corpus, seeds $2)"
    "$OUT/$1" -max_total_time="$SECONDS_EACH" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$OUT/crash_$1_" "$corpus" "$2"
}

build_lib
if [ -z "$ONLY" ] || [ "$ONLY" = modelfile ]; then
    build fuzz_modelfile
    run fuzz_modelfile examples
fi
if [ -z "$ONLY" ] || [ "$ONLY" = safetensors ]; then
    mkdir -p "$OUT/seeds_safetensors"
    seed_safetensors "$OUT/seeds_safetensors"
    build fuzz_safetensors
    run fuzz_safetensors "$OUT/seeds_safetensors"
fi
if [ -z "$ONLY" ] || [ "$ONLY" = idx ]; then
    seeds="$OUT/seeds_idx"
    mkdir -p "$seeds"
    # a 3-image 2x2 set and its labels, split after the 2-byte cut marker
    printf '\x00\x1c\x00\x00\x08\x03\x00\x00\x00\x03\x00\x00\x00\x02\x00\x00\x00\x02AAAABBBBCCCC\x00\x00\x08\x01\x00\x00\x00\x03\x01\x02\x03' > "$seeds/small"
    build fuzz_idx
    run fuzz_idx "$seeds"
fi
echo "fuzzing done: no crashes (artifacts would be in $OUT/crash_*)"
