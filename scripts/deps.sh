#!/usr/bin/env bash
# deps.sh — installs the Debian packages headroom needs, only those missing.
# Usage: scripts/deps.sh [build|data|test|bench]...  (sourced or run)
set -euo pipefail

want=(build-essential libopenblas-dev zlib1g-dev)
for role in "$@"; do
    case "$role" in
        build) want+=(libdnnl-dev) ;;  # oneDNN: CPU convolutions (built against dnnl.h, loaded at run time)
        data) want+=(dataset-fashion-mnist fortunes) ;;  # fortunes: the default text of --data fortunes
        test) want+=(dataset-fashion-mnist fortunes valgrind clang libclang-rt-14-dev python3 python3-torch chromium) ;;  # chromium: test_html opens the --html pages; python3-torch: test_suite_models compares with PyTorch
        bench) want+=(dataset-fashion-mnist python3-torch) ;;
        *) echo "deps.sh: unknown role '$role' (build, data, test, bench)" >&2; exit 2 ;;
    esac
done

missing=()
for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps.sh: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
