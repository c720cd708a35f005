#!/usr/bin/env bash
# gpu_test.sh — runs every GPU test (build/tests/gpu/test_*) and prints one
# last line "N passed, N failed" (checks, from the tests' RESULT lines; a test
# that crashes counts as one failure). Run it from anywhere on the GPU machine
# after building here:   scripts/gpu_test.sh --build   (any machine with nvcc)
# Logs go to $OUT/<test>.log when OUT is set (the device machine's output folder).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
GPU_TESTS=$(ls tests/gpu/test_*.c | sed "s|^tests/|$BUILD/tests/|; s|\.c\$||")

if [ "${1:-}" = "--build" ]; then
    exec make -j"$(nproc)" BUILD="$BUILD" all $GPU_TESTS "$BUILD/tests/test_chunk"
fi

export NCCL_NVLS_ENABLE=0
. scripts/cudnn_env.sh
[ -n "$CUDNN_FROM" ] && echo "cuDNN from $CUDNN_FROM"

pass=0
fail=0
# run_one NAME [VAR=value...] BINARY: one test run, its RESULT lines summed
run_one() {
    local name=$1
    shift
    local t=${*: -1}
    if [ ! -x "$t" ]; then
        echo "MISSING $t (build it: scripts/gpu_test.sh --build)"
        fail=$((fail + 1))
        return
    fi
    local log
    log=$(mktemp)
    timeout "${GPU_TEST_TIMEOUT:-240}" env "$@" >"$log" 2>&1
    local rc=$?
    cat "$log"
    [ -n "${OUT:-}" ] && cp "$log" "$OUT/$name.log"
    local res
    res=$(grep '^RESULT ' "$log" | awk '{p += $3; f += $4} END {print p + 0, f + 0, NR}')
    rm -f "$log"
    set -- $res
    pass=$((pass + $1))
    fail=$((fail + $2))
    if [ "$rc" -ne 0 ] && [ "$2" -eq 0 ]; then
        echo "$name exited with status $rc"
        fail=$((fail + 1))
    fi
}
for t in $GPU_TESTS; do
    run_one "$(basename "$t")" "$t"
done
# the same tests down the other paths: split-K on every Linear with k >= 32,
# cuDNN's legacy API instead of its graph API, attention's own kernels,
# inputs sent whole
# CPU tests that take the GPU too
run_one test_chunk.cuda HR_TEST_DEVICE=cuda "$BUILD/tests/test_chunk"
run_one test_cuda_ops.splitk HR_CUDA_SPLITK=32 "$BUILD/tests/gpu/test_cuda_ops"
# Linear's bias filled into y before its product, not in cuBLASLt's
# epilogue; LinearCrossEntropy's pieces read twice
run_one test_cuda_ops.nolt HR_CUDA_LT=0 "$BUILD/tests/gpu/test_cuda_ops"
run_one test_cuda_linear_gelu.nolt HR_CUDA_LT=0 "$BUILD/tests/gpu/test_cuda_linear_gelu"
run_one test_cuda_half.two_pass HR_CE_ONE_PASS=0 "$BUILD/tests/gpu/test_cuda_half"
# LayerNorm's backward as its two kernels (dx, then the column sums)
run_one test_cuda_ops.ln_two HR_LN_ONE_PASS=0 "$BUILD/tests/gpu/test_cuda_ops"
run_one test_cuda_golden.legacy HR_CUDNN_API=legacy "$BUILD/tests/gpu/test_cuda_golden"
# half attention by the kernels alone, not cuDNN's fused attention
run_one test_cuda_attention.kernels HR_CUDNN_ATTENTION=0 "$BUILD/tests/gpu/test_cuda_attention"
# cuDNN's attention a sequence or two a call (a large batch's groups)
run_one test_cuda_attention.groups HR_CUDNN_ATTENTION_GROUP=1 "$BUILD/tests/gpu/test_cuda_attention"
run_one test_cuda_graph.groups HR_CUDNN_ATTENTION_GROUP=2 "$BUILD/tests/gpu/test_cuda_graph"
run_one test_cuda_half.kernels HR_CUDNN_ATTENTION=0 "$BUILD/tests/gpu/test_cuda_half"
run_one test_cuda_ops.whole HR_CUDA_PIECE_MIN=0 "$BUILD/tests/gpu/test_cuda_ops"
# every batch input sent in pieces that the first node takes as they arrive
run_one test_cuda_ops.pieces HR_CUDA_PIECE_MIN=1 "$BUILD/tests/gpu/test_cuda_ops"
run_one test_cuda_golden.pieces HR_CUDA_PIECE_MIN=1 "$BUILD/tests/gpu/test_cuda_golden"
# every product's algorithms timed (the fastest of cuBLASLt's candidates and
# cublasGemmEx), and none
run_one test_cuda_ops.gemm_time HR_CUDA_GEMM_TIME=1 "$BUILD/tests/gpu/test_cuda_ops"
run_one test_cuda_half.gemm_time HR_CUDA_GEMM_TIME=1 "$BUILD/tests/gpu/test_cuda_half"
run_one test_cuda_graph.gemm_time HR_CUDA_GEMM_TIME=1 "$BUILD/tests/gpu/test_cuda_graph"
run_one test_cuda_ops.gemm_untimed HR_CUDA_GEMM_TIME=0 "$BUILD/tests/gpu/test_cuda_ops"
# the OOM path forced by a second process holding the memory, and a run
# that re-fits (train --fit) beside one
for script in oom_second_process fit_resume; do
    log=$(mktemp)
    BUILD="$BUILD" timeout 600 bash tests/gpu/$script.sh >"$log" 2>&1
    cat "$log"
    [ -n "${OUT:-}" ] && cp "$log" "$OUT/$script.log"
    res=$(grep '^RESULT ' "$log" | awk '{p += $3; f += $4} END {print p + 0, f + 0}')
    set -- $res
    pass=$((pass + $1))
    fail=$((fail + $2))
    [ -n "$1" ] && [ "$1" -gt 0 ] || fail=$((fail + 1))
    rm -f "$log"
done
# the memory truth: NVML's peak of each process against the printed device
# total, the budget boundary, a process filling the GPU after the start
# (GPU_TRUTH=quick for a few models, 0 to skip)
if [ "${GPU_TRUTH:-full}" != 0 ]; then
    log=$(mktemp)
    q=""
    [ "${GPU_TRUTH:-full}" = quick ] && q=--quick
    timeout 1200 python3 tests/gpu/memory_truth.py --hr "$BUILD/headroom" $q --out "${OUT:-/tmp}" >"$log" 2>&1
    cat "$log"
    res=$(grep '^RESULT ' "$log" | awk '{p += $3; f += $4} END {print p + 0, f + 0, NR}')
    set -- $res
    pass=$((pass + $1))
    fail=$((fail + $2))
    [ "$3" -gt 0 ] || fail=$((fail + 1))
    rm -f "$log"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
