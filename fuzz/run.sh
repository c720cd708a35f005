#!/usr/bin/env bash
# run.sh — builds the libFuzzer targets in fuzz/ with ASan and UBSan and runs
# each for N seconds (default 10) from its seed corpus:
#   fuzz/run.sh [N] [TARGET...]   N 0: no time limit (give FUZZ_FLAGS=-runs=...)
#   fuzz/run.sh --list            the targets, one a line
# FUZZ_OUT (default build/fuzz) holds everything it makes; FUZZ_FLAGS is added
# to each libFuzzer command line (-fork=2, -runs=10000000, ...). See docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."

# target, seed folder (committed), libFuzzer dictionary (or -)
TARGETS=(
    "modelfile   examples                 -"
    "safetensors fuzz/corpus/safetensors  fuzz/safetensors.dict"
    "idx         fuzz/corpus/idx          fuzz/idx.dict"
    "checkpoint  fuzz/corpus/checkpoint   fuzz/safetensors.dict"
    "cli         fuzz/corpus/cli          fuzz/cli.dict"
    "choices     fuzz/corpus/choices      -"
)
if [ "${1:-}" = --list ]; then
    for t in "${TARGETS[@]}"; do echo "${t%% *}"; done
    exit 0
fi

SECONDS_EACH=${1:-10}
shift || true
ONLY=("$@")
NAMES=" $(for t in "${TARGETS[@]}"; do printf '%s ' "${t%% *}"; done)"
for name in "${ONLY[@]}"; do
    [[ "$NAMES" == *" $name "* ]] || { echo "run.sh: no target '$name'; the targets:$NAMES" >&2; exit 2; }
done
OUT=${FUZZ_OUT:-build/fuzz}
CC=${FUZZ_CC:-clang}
mkdir -p "$OUT"

# Whatever a target or libFuzzer puts in a temporary folder stays under $OUT
# and must be gone when the run ends (the targets themselves use memfds).
export TMPDIR="$OUT/tmp.$$"
mkdir -p "$TMPDIR"
trap 'rm -rf "$TMPDIR"' EXIT

# The library is compiled with the same instrumentation into an archive, again
# only when a source, a header or the flags changed; the linker takes only the
# objects a target needs. CPU only: no CUDA. The commands (src/cli, without
# main.c, which fuzz_cli includes for its parser) get an archive of their own,
# made only for fuzz_cli: main() refers to them, nothing calls them.
shopt -s nullglob
LIB_SRC=(src/core/*.c src/graph/*.c src/ops/*.c src/plan/*.c src/exec/*.c src/backend/*.c
         src/backend/cpu/*.c src/data/*.c src/io/*.c)
CLI_SRC=()
for f in src/cli/*.c; do [ "$f" != src/cli/main.c ] && CLI_SRC+=("$f"); done
LIB_HDR=(include/*.h src/*/*.h src/backend/cpu/*.h)
FLAGS="-g -O1 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -pthread -fsanitize=address,undefined -fno-sanitize-recover=undefined"
LIBS="-lopenblas -lz -lm -pthread -ldl"

build_archive() { # name, sources...
    local name=$1
    shift
    local lib="$OUT/lib$name.a" stamp="$OUT/lib$name.stamp" obj="$OUT/obj_$name"
    local want="$CC $FLAGS $*"
    if [ -f "$lib" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
        [ -z "$(find "$@" "${LIB_HDR[@]}" -newer "$lib" -print -quit)" ]; then
        echo "$lib is up to date"
        return
    fi
    echo "building $lib"
    mkdir -p "$obj"
    rm -f "$lib" "$stamp" "$obj"/*.o
    local pids=() f
    for f in "$@"; do
        $CC $FLAGS -fsanitize=fuzzer-no-link -c "$f" -o "$obj/$(echo "$f" | tr / _).o" &
        pids+=($!)
        while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do sleep 0.1; done
    done
    for f in "${pids[@]}"; do wait "$f"; done # a failed compile stops the script (set -e)
    ar rcs "$lib" "$obj"/*.o
    echo "$want" >"$stamp"
}

build() { # name
    local libs=("$OUT/libheadroom_fuzz.a")
    if [ "$1" = cli ]; then
        build_archive headroom_fuzz_cli "${CLI_SRC[@]}"
        libs=("$OUT/libheadroom_fuzz_cli.a" "${libs[@]}")
    fi
    echo "building $OUT/fuzz_$1"
    $CC $FLAGS -Ifuzz -fsanitize=fuzzer -o "$OUT/fuzz_$1" "fuzz/fuzz_$1.c" "${libs[@]}" $LIBS
}

run() { # name, seed dir, dictionary
    local corpus="$OUT/corpus_fuzz_$1" dict=()
    mkdir -p "$corpus"
    [ "$3" != - ] && dict=(-dict="$3")
    local how="for ${SECONDS_EACH}s"
    [ "$SECONDS_EACH" = 0 ] && how="with no time limit"
    echo "fuzzing $1 $how${FUZZ_FLAGS:+ ($FUZZ_FLAGS)} (corpus $corpus, seeds $2${dict:+, ${dict[*]}})"
    # new inputs go to the first folder (under $OUT); the committed seeds are only read
    "$OUT/fuzz_$1" -max_total_time="$SECONDS_EACH" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$OUT/crash_$1_" "${dict[@]}" ${FUZZ_FLAGS:-} "$corpus" "$2"
}

build_archive headroom_fuzz "${LIB_SRC[@]}"
for t in "${TARGETS[@]}"; do
    read -r name seeds dict <<<"$t"
    if [ ${#ONLY[@]} -gt 0 ] && [[ " ${ONLY[*]} " != *" $name "* ]]; then continue; fi
    build "$name"
    run "$name" "$seeds" "$dict"
done
if [ -n "$(ls -A "$TMPDIR")" ]; then
    echo "run.sh: the run left files in $TMPDIR:" >&2
    ls -A "$TMPDIR" >&2
    exit 1
fi
echo "fuzzing done: no crashes (artifacts would be in $OUT/crash_*)"
