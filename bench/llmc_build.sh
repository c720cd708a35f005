#!/usr/bin/env bash
# llmc_build.sh — build llm.c's GPT-2 trainer (train_gpt2cu, Karpathy's C/CUDA
# trainer) for sm_90 (H100/H200), to measure it next to headroom with
# bench/llmc_bench.sh. Runs on any machine with nvcc (CUDA 13) and the cuDNN 9
# headers; no GPU needed. Two binaries:
#   build/llmc/train_gpt2cu        llm.c's own attention kernels
#   build/llmc/train_gpt2cu_cudnn  USE_CUDNN=1: cuDNN flash attention (cudnn-frontend)
# The source comes from the llm.c snapshot (a bare git dir), exported into
# build/llmc/src and patched here with small sed edits — nothing of llm.c is
# tracked in this repository. Each edit fails loudly when its pattern is gone.
# Env: LLMC_GIT, FRONTEND_GIT (bare git dirs), FRONTEND_REV (default v1.18.0:
#      the last tag whose headers don't call NVRTC — from 1.19.0 on, the
#      frontend's experimental engines leave nvrtc* undefined at link time),
#      OUTDIR (default build/llmc), WHICH ("plain cudnn", the default: both).
set -eu
cd "$(dirname "$0")/.."
LLMC_GIT=${LLMC_GIT:-/work/.mirror/karpathy+llm.c/repo}
FRONTEND_GIT=${FRONTEND_GIT:-/work/.mirror/NVIDIA+cudnn-frontend/repo}
FRONTEND_REV=${FRONTEND_REV:-v1.18.0} # 1.19.0 and newer need NVRTC at link time
OUTDIR=${OUTDIR:-build/llmc}
WHICH=${WHICH:-"plain cudnn"}
export PATH=/usr/local/cuda/bin:$PATH
command -v nvcc >/dev/null || { echo "llmc_build: no nvcc" >&2; exit 1; }

SRC=$OUTDIR/src
FE=$SRC/cudnn-frontend # where llm.c's Makefile looks for it
rm -rf "$SRC" "$OUTDIR/cudnn-frontend"
mkdir -p "$SRC"
git -C "$LLMC_GIT" archive HEAD | tar x -C "$SRC"
git -C "$LLMC_GIT" rev-parse HEAD >"$OUTDIR/LLMC_COMMIT"
echo "llm.c $(cat "$OUTDIR/LLMC_COMMIT")"

# sub FILE PATTERN REPLACEMENT WHY: sed 's|PATTERN|REPLACEMENT|' on FILE, or die
# when PATTERN does not occur (the snapshot moved on and the edit needs a look).
sub() {
    local f=$SRC/$1 pat=$2 rep=$3 why=$4
    grep -q -- "$pat" "$f" || { echo "llmc_build: pattern not found in $1 ($why): $pat" >&2; exit 1; }
    sed -i "s|$pat|$rep|" "$f"
    echo "  edit $1: $why"
}

# 1. CUDA 13: cudaMemAdvise takes a cudaMemLocation instead of a device id.
#    llm.c passes cudaCpuDeviceId (prefer host memory): that is {Host, 0} now.
#    (The call sits in the managed fallback that edit 2 makes unreachable; it
#    still has to compile.)
sub llmc/cuda_utils.cuh \
    'cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)' \
    'cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})' \
    'cudaMemAdvise takes a cudaMemLocation (CUDA 13)'

# 2. No cudaMallocManaged fallback: when cudaMalloc of the optimizer state
#    (m, v, master weights) fails, llm.c would fall back to managed memory —
#    oversubscribing the card that way can hang it, and it hides the limit we
#    probe for. Print a clear error and exit non-zero instead. (Every other
#    cudaMalloc in llm.c goes through cudaCheck, which already exits 1 on
#    "out of memory".)
sub llmc/cuda_utils.cuh \
    'cudaCheck_(cudaMallocManaged(out, bytes), file, line);' \
    'fprintf(stderr, "[LLMC OOM] cudaMalloc of %zu bytes failed at %s:%d (out of memory; managed fallback disabled)\\n", bytes, file, line); exit(EXIT_FAILURE);' \
    'managed-memory fallback replaced by an error exit'

# 3. No NVML: llm.c uses it only for -lg (GPU info logging), the toolkit here
#    has neither nvml.h nor libnvidia-ml, and the binaries needn't depend on it.
sub llmc/mfu.h '^#if __has_include(<nvml.h>)' '#if 0 // headroom: NVML off' 'NVML off'
sub Makefile '^  NVCC_LDFLAGS += -lnvidia-ml' '  # headroom: no -lnvidia-ml' 'no -lnvidia-ml'

# cudnn-frontend (header-only) for the USE_CUDNN=1 build
mkdir -p "$FE"
git -C "$FRONTEND_GIT" archive "$FRONTEND_REV" include | tar x -C "$FE"
git -C "$FRONTEND_GIT" rev-parse "$FRONTEND_REV^{commit}" >"$OUTDIR/FRONTEND_COMMIT"
echo "cudnn-frontend $(cat "$OUTDIR/FRONTEND_COMMIT") ($(sed -n 's/^#define CUDNN_FRONTEND_\(MAJOR\|MINOR\|PATCH\)_VERSION \([0-9]*\).*/\2/p' "$FE/include/cudnn_frontend_version.h" | paste -sd.))"

# make in $SRC: one GPU (no NCCL, no MPI), sm_90, bf16 (llm.c's default)
MK=(NO_MULTI_GPU=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY=90 PRECISION=BF16 CI=true)
build() { # NAME USE_CUDNN
    local name=$1 cudnn=$2
    rm -f "$SRC/train_gpt2cu" "$SRC"/build/*.o
    echo "building $name (USE_CUDNN=$cudnn)"
    (cd "$SRC" && make train_gpt2cu "${MK[@]}" USE_CUDNN="$cudnn" CUDNN_FRONTEND_PATH=cudnn-frontend/include) \
        >"$OUTDIR/$name.build.log" 2>&1 || { tail -40 "$OUTDIR/$name.build.log" >&2; echo "llmc_build: $name failed (log: $OUTDIR/$name.build.log)" >&2; return 1; }
    strip "$SRC/train_gpt2cu"
    mv "$SRC/train_gpt2cu" "$OUTDIR/$name"
    echo "  $OUTDIR/$name: $(du -h "$OUTDIR/$name" | cut -f1)"
    ldd "$OUTDIR/$name" | sed 's/^/    /'
}
rc=0
for w in $WHICH; do
    case $w in
        plain) build train_gpt2cu 0 || rc=1 ;;
        cudnn) build train_gpt2cu_cudnn 1 || rc=1 ;;
        *) echo "llmc_build: unknown WHICH entry $w" >&2; rc=1 ;;
    esac
done
exit $rc
