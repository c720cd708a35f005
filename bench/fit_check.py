#!/usr/bin/env python3
"""fit_check.py — `headroom fit` against exhaustive measurement, on this GPU.

For each seed model at a batch where activations dominate, and budgets of
the runtime overhead plus 1, 0.75, 0.5 and 0.35 of the plan's arena:
  1. `headroom fit --json` (it measures the candidates its cache lacks), timed;
  2. again with the cache warm, timed (the answer time users see);
  3. every candidate that fits, run for real: `bench_step ... --accumulate K
     --recompute L` (median of STEPS steps after WARM), which also prints the
     prediction from the cache.
Then per budget: fit's choice, its measured step time against the fastest
measured candidate (target: within 10%), its prediction against its
measurement (target: within 15%), and the extra time against the full
budget's (target at half: <= 20%).

    python3 bench/fit_check.py [--build build] [--out DIR] [--models mlp,simple_cnn,deep_cnn]

One JSON line per measurement to OUT/fit_check.jsonl; the table last.
"""

import argparse
import json
import os
import subprocess
import sys
import time

BATCH = {"mlp": 32768, "simple_cnn": 4096, "deep_cnn": 2048, "resnet_tiny": 1024}
FRACTIONS = [1.0, 0.75, 0.5, 0.35]


def run(cmd, timeout):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p, time.time() - t0


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    ap.add_argument("--models", default="mlp,simple_cnn,deep_cnn")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--max-candidates", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=480)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    hr, bench = os.path.join(a.build, "headroom"), os.path.join(a.build, "bench", "bench_step")
    res = open(os.path.join(a.out, "fit_check.jsonl"), "a")
    t_start = time.time()
    rows = []
    for name in a.models.split(","):
        model, B = f"examples/{name}.model", BATCH[name]
        p, _ = run([hr, "plan", model, "--batch", str(B), "--device", "cuda", "--json"], 120)
        js = json_lines(p.stdout)
        if len(js) < 2:
            print(f"{name}: plan failed: {p.stderr.strip()[-300:]}", file=sys.stderr)
            continue
        total0, arena0 = js[1]["device_total"], js[0]["arena_bytes"]
        pages0 = (arena0 + (2 << 20) - 1) // (2 << 20) * (2 << 20)
        base_ms = None
        for f in FRACTIONS:
            if time.time() - t_start > a.time_limit:
                print("time limit reached: the rest is skipped", file=sys.stderr)
                break
            budget = int(total0 - pages0 + f * arena0)  # the overhead, and f of the arena
            cmd = [hr, "fit", model, "--batch", str(B), "--budget", str(budget), "--device", "cuda",
                   "--precision", a.precision, "--json"]
            p, t_cold = run(cmd, 300)
            p2, t_warm = run(cmd, 300)
            fj = json_lines(p2.stdout) or json_lines(p.stdout)
            if not fj:
                rec = {"model": name, "budget": budget, "fraction": f, "error": (p2.stderr or p.stderr)[-400:]}
                res.write(json.dumps(rec) + "\n")
                rows.append(rec)
                continue
            fit = fj[0]
            cands = [c for c in fit["candidates"] if c["fits"]][: a.max_candidates]
            measured = []
            for c in cands:
                bcmd = [bench, model, str(B), str(a.steps), str(a.warm), "cuda", "--precision", c["precision"],
                        "--accumulate", str(c["accumulate"])]
                if c["recompute"]:
                    bcmd += ["--recompute", c["recompute"]]
                bp, _ = run(bcmd, 300)
                bj = json_lines(bp.stdout)
                m = bj[0] if bj else {"error": bp.stderr[-300:]}
                measured.append({"cand": c, "median_ms": m.get("median_ms"), "predicted_ms": m.get("predicted_ms"),
                                 "job_total": m.get("job_total"), "error": m.get("error")})
            ok = [m for m in measured if m["median_ms"]]
            chosen = measured[0] if measured and measured[0]["median_ms"] else None
            best = min(ok, key=lambda m: m["median_ms"]) if ok else None
            rec = {"model": name, "batch": B, "budget": budget, "fraction": f, "fit_s_cold": round(t_cold, 3),
                   "fit_s_warm": round(t_warm, 3), "candidates": len(fit["candidates"]), "measured": measured}
            if chosen:
                if f == 1.0:
                    base_ms = chosen["median_ms"]
                rec.update({
                    "choice": f'{chosen["cand"]["micro_batch"]}x{chosen["cand"]["accumulate"]}'
                              + (f' rc[{chosen["cand"]["recompute"]}]' if chosen["cand"]["recompute"] else ""),
                    "choice_ms": chosen["median_ms"], "choice_pred_ms": chosen["predicted_ms"],
                    "fit_pred_ms": chosen["cand"]["step_ms"],
                    "best_ms": best["median_ms"],
                    "choice_vs_best": chosen["median_ms"] / best["median_ms"],
                    "pred_err": (chosen["predicted_ms"] - chosen["median_ms"]) / chosen["median_ms"]
                    if chosen["predicted_ms"] else None,
                    "extra_vs_full": chosen["median_ms"] / base_ms - 1 if base_ms else None,
                })
            res.write(json.dumps(rec) + "\n")
            res.flush()
            rows.append(rec)
    print("\n| model | batch | budget (x plan) | fit's choice | step ms | fastest measured | choice/fastest "
          "| predicted ms | pred. error | extra vs full budget | fit s (cold / warm) |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "choice" not in r:
            print(f"| {r['model']} | {r.get('batch', '')} | {r['fraction']:.2f} | {r.get('error', 'nothing measured')[:60]} "
                  "| | | | | | | |")
            continue
        pe = f"{100 * r['pred_err']:+.1f}%" if r["pred_err"] is not None else "-"
        ev = f"{100 * r['extra_vs_full']:+.1f}%" if r["extra_vs_full"] is not None else "-"
        print(f"| {r['model']} | {r['batch']} | {r['fraction']:.2f} | {r['choice']} | {r['choice_ms']:.3f} | "
              f"{r['best_ms']:.3f} | {r['choice_vs_best']:.3f} | {r['choice_pred_ms']:.3f} | {pe} | {ev} | "
              f"{r['fit_s_cold']:.2f} / {r['fit_s_warm']:.2f} |")


if __name__ == "__main__":
    main()
