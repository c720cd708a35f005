#!/usr/bin/env bash
# graph_bench.sh — the training step as one CUDA graph against node by node
# (HR_CUDA_GRAPH=0) and against PyTorch eager (cudnn.benchmark on), in the
# same run, each measurement its own process: bench_step's median step
# (hr_train_step, loss read back each step) and its queued_ms (the same
# steps queued two at a time, hr_train_submit), torch_gpu.py's median step
# (.item() each step). fp32 and bf16, Adam(1e-3), the seed models at their
# seed batch and 32x. Build first (make all), then on the GPU machine:
#
#     bash bench/graph_bench.sh        # about 2 minutes
#
# Knobs: BUILD (build), PY (python3), STEPS (30), WARM (5), CASES ("model
# batch precision" triples, ';'-separated), RES (results folder: $OUT or
# bench/results).
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
BUILD=${BUILD:-build}
PY=${PY:-python3}
STEPS=${STEPS:-30}
WARM=${WARM:-5}
RES=${RES:-${OUT:-bench/results}}
CASES=${CASES:-"mlp 1024 fp32;simple_cnn 128 fp32;deep_cnn 64 fp32;mlp 1024 bf16;simple_cnn 128 bf16;deep_cnn 64 bf16;mlp 32768 fp32;simple_cnn 4096 fp32;deep_cnn 2048 fp32"}
mkdir -p "$RES"
J=$RES/graph_bench.jsonl
: >"$J"
. scripts/cudnn_env.sh
IFS=';' read -ra LIST <<<"$CASES"
for c in "${LIST[@]}"; do
    read -r model batch prec <<<"$c"
    HR_BENCH_PRECISION=$prec "$BUILD/bench/bench_step" "examples/$model.model" "$batch" "$STEPS" "$WARM" cuda |
        sed -n "s/^{/{\"case\": \"graph\", /p" >>"$J"
    HR_CUDA_GRAPH=0 HR_BENCH_PRECISION=$prec "$BUILD/bench/bench_step" "examples/$model.model" "$batch" "$STEPS" "$WARM" cuda |
        sed -n "s/^{/{\"case\": \"nodes\", /p" >>"$J"
    amp=""
    [ "$prec" != fp32 ] && amp="--amp $prec"
    $PY bench/torch_gpu.py step --model "$model" --batch "$batch" --steps "$STEPS" --warmup "$WARM" --benchmark \
        --no-extra $amp | sed -n "s/^{/{\"case\": \"torch\", /p" >>"$J"
done
$PY - "$J" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def key(r):
    m = r["model"].split("/")[-1].replace(".model", "")
    prec = r.get("amp") if r["case"] == "torch" else r.get("precision")
    return (m, int(r["batch"]), prec or "fp32")
by = {}
for r in rows:
    by.setdefault(key(r), {})[r["case"]] = r
print("| model | batch | prec | node by node ms | graph ms | graph, queued ms | PyTorch ms | graph / PyTorch | queued / PyTorch |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
for k, v in by.items():
    g, n, t = v.get("graph"), v.get("nodes"), v.get("torch")
    if not (g and n and t):
        continue
    tm = t["median_ms"]
    print(f"| {k[0]} | {k[1]} | {k[2]} | {n['median_ms']:.3f} | {g['median_ms']:.3f} | {g['queued_ms']:.3f} | "
          f"{tm:.3f} | {g['median_ms'] / tm:.2f} | {g['queued_ms'] / tm:.2f} |")
    if g.get("graph") != 1:
        print(f"  ({k[0]} {k[1]} {k[2]}: not one graph: {g.get('graph_why')})")
PY
