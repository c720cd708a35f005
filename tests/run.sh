#!/usr/bin/env bash
# run.sh BUILD_DIR — runs every BUILD_DIR/tests/test_* binary from the
# repository root, each under a timeout, adds up their "RESULT file pass fail"
# lines and ends with one line "N passed, N failed". A binary that crashes,
# times out, prints no RESULT line or exits non-zero with no failed check
# counts as one failure, and the reason is printed. Exit status: 0 only if
# nothing failed.
#
# test_trace trains briefly through BUILD_DIR/headroom and checks each trace
# with tests/trace_check.py (python3, standard library only).
#
# test_faults runs under valgrind (leaks and memory errors fail it) when
# valgrind is installed. Environment:
#   HR_TEST_TIMEOUT   seconds per binary (default 300; 900 under valgrind)
#   HR_VALGRIND       0: no valgrind even if installed
#   HR_VALGRIND_TESTS space-separated binaries to run under valgrind (default: test_faults)
#   HR_TESTS          space-separated binaries to run (default: all)
# Full output of each binary: BUILD_DIR/tests/logs/NAME.log.
set -u

build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
case $build in /*) ;; *) build=$root/$build ;; esac
cd "$root" || exit 2

if [ ! -d "$build/tests" ]; then
    echo "run.sh: no $build/tests: build the tests first (make CUDA=0 all)" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

timeout_s=${HR_TEST_TIMEOUT:-300}
vg_tests=${HR_VALGRIND_TESTS:-test_faults}
have_vg=0
if [ "${HR_VALGRIND:-1}" != 0 ] && command -v valgrind >/dev/null 2>&1; then have_vg=1; fi
logs=$build/tests/logs
mkdir -p "$logs"

total_pass=0
total_fail=0
nbin=0
failed_bins=()

describe_status() { # exit status -> words
    local rc=$1
    case $rc in
    124) echo "timed out after ${2}s" ;;
    137) echo "killed (SIGKILL, after the timeout or out of memory)" ;;
    *)
        if [ "$rc" -gt 128 ]; then
            local sig=$((rc - 128))
            echo "crashed with signal $sig ($(kill -l "$sig" 2>/dev/null || echo '?'))"
        else
            echo "exited with status $rc"
        fi
        ;;
    esac
}

shopt -s nullglob
bins=("$build"/tests/test_*)
if [ -n "${HR_TESTS:-}" ]; then
    bins=()
    for t in $HR_TESTS; do bins+=("$build/tests/$t"); done
fi

for bin in "${bins[@]}"; do
    [ -f "$bin" ] && [ -x "$bin" ] || { [ -n "${HR_TESTS:-}" ] && echo "MISSING $bin" && total_fail=$((total_fail + 1)); continue; }
    case $bin in *.d | *.o | *.log) continue ;; esac
    name=$(basename "$bin")
    log=$logs/$name.log
    nbin=$((nbin + 1))
    cmd=("$bin")
    t=$timeout_s
    how=""
    if [[ " $vg_tests " == *" $name "* ]]; then
        if [ $have_vg = 1 ]; then
            cmd=(valgrind -q --suppressions=tests/valgrind.supp --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=1 "$bin")
            t=${HR_TEST_TIMEOUT:-900}
            how=" (under valgrind)"
        else
            how=" (valgrind not installed: no leak check)"
        fi
    fi
    envs=()
    [ -n "$how" ] && [ $have_vg = 1 ] && envs=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)
    start=$(date +%s%N)
    { env "${envs[@]}" timeout -k 10 "$t" "${cmd[@]}" >"$log" 2>&1 </dev/null; } 2>/dev/null # (bash's own crash notice)
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    secs=$(printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)))

    # every RESULT line of the binary, summed
    read -r p f nres < <(awk '$1 == "RESULT" && NF >= 4 { p += $(NF-1); f += $NF; n++ }
                              END { printf "%d %d %d\n", p, f, n }' "$log")
    reason=""
    if [ "$nres" -eq 0 ]; then
        if [ $rc -eq 0 ]; then reason="printed no RESULT line"; else reason="$(describe_status $rc "$t") before its RESULT line"; fi
        f=$((f + 1))
    elif [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
        if [ -n "$how" ] && [ $rc -eq 1 ]; then reason="valgrind found errors"; else reason="$(describe_status $rc "$t") with no failed check"; fi
        f=$((f + 1))
    elif [ $rc -ne 0 ] && [ $rc -gt 128 ]; then
        reason="$(describe_status $rc "$t") after its RESULT line"
        f=$((f + 1))
    fi
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))

    # skips the binary announced ("SKIP ...")
    grep -E '^SKIP' "$log" | sed 's/^/    /'
    if [ "$f" -eq 0 ]; then
        printf 'PASS %-18s %6d checks  %6ss%s\n' "$name" "$p" "$secs" "$how"
    else
        failed_bins+=("$name")
        printf 'FAIL %-18s %6d passed, %d failed  %ss%s%s\n' "$name" "$p" "$f" "$secs" "$how" "${reason:+ — $reason}"
        # the first failures, to start from (the whole output is in the log)
        grep -E '^FAIL |^==[0-9]+== (Invalid|[0-9,]+ bytes in|Mismatched|Conditional)' "$log" | head -8 | sed 's/^/    /'
        echo "    (full output: $log)"
    fi
done

# A short fuzzing run of each target that fuzz/run.sh lists (the readers,
# the checkpoint loader, the command line; libFuzzer, ASan, UBSan): one check
# per target. It writes only under BUILD_DIR/fuzz. HR_FUZZ_SECONDS=0 skips it.
fuzz_s=${HR_FUZZ_SECONDS:-5}
if [ "$fuzz_s" != 0 ] && command -v clang >/dev/null 2>&1; then
    for target in $(bash fuzz/run.sh --list); do
        log="$logs/fuzz_$target.log"
        if FUZZ_OUT="$build/fuzz" bash fuzz/run.sh "$fuzz_s" "$target" >"$log" 2>&1; then
            total_pass=$((total_pass + 1))
            printf 'PASS %-18s %6d checks  %6ss (libFuzzer, %s)\n' "fuzz_$target" 1 "$fuzz_s" \
                "$(grep -o 'Done [0-9]* runs' "$log" | tail -1)"
        else
            total_fail=$((total_fail + 1))
            failed_bins+=("fuzz_$target")
            printf 'FAIL %-18s crash or error; see %s\n' "fuzz_$target" "$log"
            grep -E 'ERROR|SUMMARY|crash' "$log" | head -5 | sed 's/^/    /'
        fi
    done
else
    echo "SKIP fuzzing (no clang, or HR_FUZZ_SECONDS=0)"
fi

if [ $nbin -eq 0 ]; then
    echo "run.sh: no test binaries in $build/tests" >&2
    total_fail=$((total_fail + 1))
fi
[ ${#failed_bins[@]} -gt 0 ] && echo "failed: ${failed_bins[*]}"
echo "$total_pass passed, $total_fail failed"
[ $total_fail -eq 0 ]
