#!/usr/bin/env bash
# main.sh — the main job from a fresh machine: install what is missing, build,
# and train the default model on Fashion-MNIST on the best device present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh build data
make -j"$(nproc)" build/headroom >/dev/null
exec ./build/headroom train examples/fashion.model --data fashion-mnist --epochs "${EPOCHS:-10}" \
    --batch "${BATCH:-64}" --device auto --save "${SAVE:-fashion.ckpt.safetensors}" "$@"
