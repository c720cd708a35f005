#!/usr/bin/env bash
# test.sh — every test from a fresh machine: install what is missing, build
# (CUDA parts too when nvcc is present), run the tests; the last line reads
# "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh build test
make -j"$(nproc)" all >/dev/null
exec bash tests/run.sh build
