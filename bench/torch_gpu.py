#!/usr/bin/env python3
"""torch_gpu.py — the PyTorch (eager) side of bench/gpu_bench.sh, one fresh
process per measurement so that memory peaks never mix.

    python3 bench/torch_gpu.py step    --model mlp --batch 1024 [--steps 20 --warmup 5]
    python3 bench/torch_gpu.py largest --model mlp --batch 1024 [--max-probes 22 --time-limit 120]
    python3 bench/torch_gpu.py report  FILE.jsonl        (the tables of docs/benchmarks.md)

The seed models are scripts/make_golden.py's nn.Sequential (the same layers as
examples/*.model), Adam(lr 1e-3), CrossEntropyLoss, fp32 throughout: TF32 is
off for matrix products and for cuDNN convolutions (PyTorch's default lets
cuDNN use TF32; headroom keeps to fp32 unless asked), so both sides compute
the same function at the same precision.

step: one random batch lives in ordinary (pageable) host memory, as
headroom's does; every step copies it to the device (x.to('cuda')), runs
zero_grad, forward, loss, backward, Adam, and reads the loss with .item(),
which synchronises, exactly as hr_train_step(..., &loss) does. The host clock
(perf_counter) around each step gives the median over --steps after
--warmup. The peaks torch.cuda.max_memory_allocated / max_memory_reserved
and the device's used bytes (mem_get_info) are read right after the timed
steps. Then, for information only (timing, no effect on the peaks above): the
same loop with the batch already on the device, and with PyTorch's default
precision (TF32 convolutions).

largest: one warm-up step at --batch (Adam's state exists from then on), then
real training steps at growing batches (doubling, then bisection to --tol),
each on a fresh random batch made on the device, catching
torch.cuda.OutOfMemoryError (and other CUDA/cuDNN failures) and emptying the
cache between probes; at most --max-probes probes and --time-limit seconds.
The probes run in a child process: one that gives no answer within
--probe-timeout seconds is stopped and counted as a failure (seen with
deep_cnn at batch 131072, where a step did not finish in minutes), and the
search goes on in a fresh child (which first repeats the warm-up step).

ONE JSON line goes to stdout.
"""

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time

torch = nn = build_model = input_shape = None  # imported by load_torch(): the report needs no torch


def load_torch():
    global torch, nn, build_model, input_shape
    import torch as t
    import torch.nn as tnn
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    from make_golden import build_model as bm, input_shape as ish
    torch, nn, build_model, input_shape = t, tnn, bm, ish


def set_precision(tf32_conv):
    """fp32 (IEEE) matrix products; cuDNN convolutions in fp32 or TF32."""
    conv = "tf32" if tf32_conv else "ieee"
    try:  # the API of PyTorch 2.9 and later
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        torch.backends.cudnn.conv.fp32_precision = conv
        return "matmul ieee, conv " + conv
    except (AttributeError, AssertionError):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = tf32_conv
        return "allow_tf32: matmul False, cudnn %s" % tf32_conv


def setup(name, seed=0):
    torch.manual_seed(seed)
    dev = torch.device("cuda")
    model = build_model(name).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return dev, model, opt, nn.CrossEntropyLoss()


def device_used():
    free, total = torch.cuda.mem_get_info()
    return total - free, total


def cmd_step(a):
    prec = set_precision(False)
    torch.cuda.init()
    used0, total = device_used()  # the context exists, nothing else
    dev, model, opt, lossf = setup(a.model)
    shp = (a.batch,) + input_shape(a.model)
    x_host = torch.rand(shp) * 2 - 1
    y_host = torch.randint(0, 10, (a.batch,))

    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.amp)
    scaler = torch.amp.GradScaler("cuda") if a.amp == "fp16" else None
    if a.benchmark:
        torch.backends.cudnn.benchmark = True

    def step(x, y):
        xb, yb = x.to(dev), y.to(dev)
        opt.zero_grad()
        if amp is None:
            loss = lossf(model(xb), yb)
            loss.backward()
            opt.step()
            return loss.item()
        with torch.autocast(device_type="cuda", dtype=amp):
            loss = lossf(model(xb), yb)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss.item()

    def timed(x, y):
        for _ in range(a.warmup):
            step(x, y)
        ts, loss = [], None
        for _ in range(a.steps):
            t0 = time.perf_counter()
            loss = step(x, y)
            ts.append((time.perf_counter() - t0) * 1e3)
        return ts, loss

    ts, loss = timed(x_host, y_host)
    torch.cuda.synchronize()
    used1, _ = device_used()
    out = {
        "impl": "pytorch", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
        "precision": ("autocast " + a.amp) if a.amp else prec, "cudnn_benchmark": bool(a.benchmark),
        "model": a.model, "batch": a.batch, "steps": a.steps, "warmup": a.warmup,
        "median_ms": round(statistics.median(ts), 4), "mean_ms": round(statistics.mean(ts), 4),
        "min_ms": round(min(ts), 4), "max_ms": round(max(ts), 4),
        "samples_per_s": round(a.batch / (statistics.median(ts) / 1e3), 1), "loss": loss,
        "max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved(),
        "device_used_after_init": used0, "device_used_end": used1, "device_total": total,
    }
    if not a.no_extra:
        x_dev, y_dev = x_host.to(dev), y_host.to(dev)
        ts2, _ = timed(x_dev, y_dev)
        out["device_input_median_ms"] = round(statistics.median(ts2), 4)
        del x_dev, y_dev
        set_precision(True)
        ts3, _ = timed(x_host, y_host)
        out["tf32_conv_median_ms"] = round(statistics.median(ts3), 4)
    print(json.dumps(out))


def cmd_largest_child(a):
    """Probes batches read from stdin, one JSON line out per probe."""
    set_precision(False)
    dev, model, opt, lossf = setup(a.model)
    shp = input_shape(a.model)

    def probe(b):
        t0 = time.perf_counter()
        ok, why, x, y, loss = False, "", None, None, None
        try:
            x = torch.randn((b,) + shp, device=dev)
            y = torch.randint(0, 10, (b,), device=dev)
            opt.zero_grad()
            loss = lossf(model(x), y)
            loss.backward()
            opt.step()
            v = loss.item()
            torch.cuda.synchronize()
            ok = math.isfinite(v)
            why = "" if ok else "loss %r" % v
        except torch.cuda.OutOfMemoryError as e:
            why = "OutOfMemoryError: " + str(e).split("\n")[0][:200]
        except RuntimeError as e:
            why = type(e).__name__ + ": " + str(e).split("\n")[0][:200]
        del x, y, loss
        opt.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.empty_cache()
        return {"batch": b, "ok": ok, "secs": round(time.perf_counter() - t0, 3), "why": why}

    r = probe(a.batch)  # Adam's state exists from here on
    print(json.dumps({"ready": r["ok"], "device": torch.cuda.get_device_name(), "torch": torch.__version__}),
          flush=True)
    for line in sys.stdin:
        print(json.dumps(probe(int(line))), flush=True)


def cmd_largest(a):
    """Doubling then bisection; every probe runs in a child process (see
    largest-child), so that a probe that runs past --probe-timeout (cuDNN
    trying engine after engine on a huge shape, say) is stopped and counted
    as a failure, and the search goes on in a fresh child."""
    import select
    import subprocess
    t_start = time.perf_counter()
    probes, info = [], {}
    child = [None]

    def start():
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "largest-child", "--model", a.model,
                              "--batch", str(a.batch)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             bufsize=1)
        r, _, _ = select.select([p.stdout], [], [], 120)
        line = p.stdout.readline() if r else ""
        if not line or not json.loads(line).get("ready"):
            p.kill()
            p.wait()
            return None
        info.update(json.loads(line))
        return p

    def stop():
        if child[0]:
            child[0].kill()
            child[0].wait()
            child[0] = None

    def probe(b):
        if child[0] is None:
            child[0] = start()
        if child[0] is None:
            r = {"batch": b, "ok": False, "secs": 0, "why": "the child process could not start"}
        else:
            t0 = time.perf_counter()
            child[0].stdin.write("%d\n" % b)
            child[0].stdin.flush()
            ready, _, _ = select.select([child[0].stdout], [], [], a.probe_timeout)
            line = child[0].stdout.readline() if ready else ""
            if line:
                r = json.loads(line)
            else:
                why = ("timeout: no result after %.0f s" % a.probe_timeout if not ready
                       else "the child exited (status %s)" % child[0].poll())
                r = {"batch": b, "ok": False, "secs": round(time.perf_counter() - t0, 3), "why": why}
                stop()
        probes.append(r)
        print("probe %d: %s %s" % (b, "ok" if r["ok"] else "FAILED", r["why"]), file=sys.stderr, flush=True)
        return r["ok"]

    def out_of_budget():
        return len(probes) >= a.max_probes or time.perf_counter() - t_start > a.time_limit

    lo, hi = 0, None
    if child[0] is None:
        child[0] = start()
    if child[0] is not None:
        lo = a.batch  # the child's first step ran at the seed batch
        while hi is None and not out_of_budget():
            if probe(lo * 2):
                lo *= 2
            else:
                hi = lo * 2
        while hi is not None and hi - lo > max(1, int(a.tol * lo)) and not out_of_budget():
            mid = (lo + hi) // 2
            if probe(mid):
                lo = mid
            else:
                hi = mid
    stop()
    print(json.dumps({
        "impl": "pytorch", "mode": "largest", "torch": info.get("torch"), "device": info.get("device"),
        "model": a.model, "seed_batch": a.batch, "largest": lo, "first_failing": hi,
        "converged": hi is not None and hi - lo <= max(1, int(a.tol * lo)), "tol": a.tol,
        "probe_timeout_s": a.probe_timeout, "search_s": round(time.perf_counter() - t_start, 2), "probes": probes,
    }))


# ---- the report: tables from gpu_bench.sh's JSON lines ---------------------------------
def mib(b):
    return "%.1f" % (b / 2**20) if b is not None else "-"


def ratio(a, b):
    return "%.2f" % (a / b) if a and b else "-"


def cmd_report(a):
    rows = [json.loads(line) for line in open(a.file) if line.strip().startswith("{")]
    by = {}
    for r in rows:
        by.setdefault((r.get("part"), r.get("impl"), os.path.basename(str(r.get("model", ""))).replace(".model", ""),
                       r.get("batch", r.get("seed_batch"))), r)
    info = next((r for r in rows if r.get("part") == "info"), {})
    print("GPU: %s, driver %s, torch %s, cuDNN %s, %s" % (info.get("gpu"), info.get("driver"), info.get("torch"),
                                                      info.get("cudnn"), info.get("date")))
    print()
    print("| model | batch | headroom ms | PyTorch ms | ratio | headroom samples/s | PyTorch samples/s "
          "| PyTorch ms (batch on GPU) | PyTorch ms (TF32 conv) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    cfgs = [k[2:] for k in by if k[0] == "step" and k[1] == "headroom"]
    for model, b in cfgs:
        h, t = by[("step", "headroom", model, b)], by.get(("step", "pytorch", model, b), {})
        print("| %s | %s | %.3f | %s | %s | %.0f | %s | %s | %s |" % (
            model, b, h.get("median_ms", float("nan")), t.get("median_ms", "-"),
            ratio(h.get("median_ms"), t.get("median_ms")), h.get("samples_per_s", 0), t.get("samples_per_s", "-"),
            t.get("device_input_median_ms", "-"), t.get("tf32_conv_median_ms", "-")))
    print()
    print("| model | batch | hr arena MiB | hr alloc delta MiB | hr lazy MiB | hr overhead MiB | hr device used MiB "
          "| torch max_allocated MiB | torch max_reserved MiB | torch device used MiB | arena / reserved |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model, b in cfgs:
        h, t = by[("step", "headroom", model, b)], by.get(("step", "pytorch", model, b), {})
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            model, b, mib(h.get("arena_bytes")), mib(h.get("alloc_delta")), mib(h.get("lazy_after_alloc")),
            mib(h.get("overhead_bytes")), mib(h.get("device_used_end")), mib(t.get("max_allocated")),
            mib(t.get("max_reserved")), mib(t.get("device_used_end")),
            ratio(h.get("arena_bytes"), t.get("max_reserved"))))
    print()
    print("| model | headroom planned | headroom confirmed | PyTorch largest (probes) | ratio |")
    print("|---|---:|---:|---:|---:|")
    for k, h in by.items():
        if k[0] != "largest" or k[1] != "headroom":
            continue
        t = by.get(("largest", "pytorch", k[2], k[3]), {})
        print("| %s | %s | %s | %s (%d%s) | %s |" % (
            k[2], h.get("largest_planned"), h.get("largest_confirmed"), t.get("largest", "-"),
            len(t.get("probes", [])), "" if t.get("converged") else ", not converged",
            ratio(h.get("largest_confirmed"), t.get("largest"))))
    algos = {}
    for r in rows:
        if r.get("part") == "algos":
            m = os.path.basename(str(r.get("model", ""))).replace(".model", "")
            algos.setdefault((m, r.get("batch")), {})[r.get("algo")] = r
    if algos:
        modes = sorted({a for v in algos.values() for a in v})
        print()
        print("| headroom ms (arena MiB) by cuDNN choice | " + " | ".join(modes) + " |")
        print("|---|" + "---:|" * len(modes))
        for (m, b), v in algos.items():
            print("| %s %s | " % (m, b) + " | ".join(
                "%.3f (%s)" % (v[a]["median_ms"], mib(v[a].get("arena_bytes"))) if a in v and "median_ms" in v[a]
                else "-" for a in modes) + " |")
    fh, ft = by.get(("fashion", "headroom", "fashion", 64)), by.get(("fashion", "pytorch", "fashion", 64))
    if fh or ft:
        print()
        print("| main job (fashion, 10 epochs, batch 64) | test accuracy | wall s (whole command) | train s (epochs) |")
        print("|---|---:|---:|---:|")
        for name, r in (("headroom", fh), ("PyTorch", ft)):
            if r:
                print("| %s | %s | %s | %s |" % (name, r.get("final_test_acc"), r.get("wall_s"), r.get("train_s")))
        if fh and ft and fh.get("wall_s") and ft.get("wall_s"):
            print("\nwall-time ratio headroom / PyTorch: %.2f (train only: %s)" % (
                fh["wall_s"] / ft["wall_s"], ratio(fh.get("train_s"), ft.get("train_s"))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("step")
    s.add_argument("--model", choices=["mlp", "simple_cnn", "deep_cnn"], required=True)
    s.add_argument("--batch", type=int, required=True)
    s.add_argument("--steps", type=int, default=20)
    s.add_argument("--warmup", type=int, default=5)
    s.add_argument("--no-extra", action="store_true", help="skip the informational variants")
    s.add_argument("--amp", choices=["bf16", "fp16"], help="torch.autocast in this type (fp16: with GradScaler)")
    s.add_argument("--benchmark", action="store_true", help="cudnn.benchmark = True (speed runs)")
    g = sub.add_parser("largest")
    g.add_argument("--model", choices=["mlp", "simple_cnn", "deep_cnn"], required=True)
    g.add_argument("--batch", type=int, required=True)
    g.add_argument("--max-probes", type=int, default=22)
    g.add_argument("--time-limit", type=float, default=120)
    g.add_argument("--tol", type=float, default=0.02)
    g.add_argument("--probe-timeout", type=float, default=30)
    c = sub.add_parser("largest-child")
    c.add_argument("--model", choices=["mlp", "simple_cnn", "deep_cnn"], required=True)
    c.add_argument("--batch", type=int, required=True)
    r = sub.add_parser("report")
    r.add_argument("file")
    a = ap.parse_args()
    if a.cmd in ("step", "largest-child"):
        load_torch()
    {"step": cmd_step, "largest": cmd_largest, "largest-child": cmd_largest_child, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    main()
