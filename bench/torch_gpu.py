#!/usr/bin/env python3
"""torch_gpu.py — the PyTorch (eager) side of bench/gpu_bench.sh, bench/amp_bench.sh
and bench/fit_bench.sh, one fresh process per measurement so that memory peaks
never mix.

    python3 bench/torch_gpu.py step    --model mlp --batch 1024 [--steps 20 --warmup 5]
                                       [--amp bf16|fp16] [--checkpoint] [--benchmark | --memory-first]
                                       [--compile]
    python3 bench/torch_gpu.py largest --model mlp --batch 1024 [--amp bf16] [--checkpoint]
                                       [--max-probes 22 --time-limit 120 --tol 0.02 --probe-timeout 30]
    python3 bench/torch_gpu.py largest --halving --model mlp --batch 1024 --start 65536 [...]
    python3 bench/torch_gpu.py report  FILE.jsonl [FILE.jsonl ...]   (the tables of docs/benchmarks.md)
    python3 bench/torch_gpu.py selftest          (CPU: checkpointed gradients, the searches, the modes)

The seed models are scripts/make_golden.py's nn.Sequential (the same layers as
examples/*.model), Adam(lr 1e-3), CrossEntropyLoss, fp32 throughout: TF32 is
off for matrix products and for cuDNN convolutions (PyTorch's default lets
cuDNN use TF32; headroom keeps to fp32 unless asked), so both sides compute
the same function at the same precision. --amp bf16|fp16 runs the forward
pass and the loss under torch.autocast (fp16 with a GradScaler), as a user of
Accelerate's mixed_precision gets.

--checkpoint: activation checkpointing as PyTorch users write it, one
torch.utils.checkpoint per block (use_reentrant=False). A block is a run of
consecutive layers that ends at an activation (ReLU) together with the layers
without parameters that follow it (pooling, Flatten): the next layer with
weights starts a new block, so mlp is [Linear ReLU] [Linear ReLU] [Linear],
deep_cnn [Conv2d ReLU MaxPool2d] x2, [Conv2d ReLU MaxPool2d Flatten], [Linear].
Every block but the last is checkpointed: its inner activations are dropped
after the forward pass and computed again in the backward pass; the input of
each block is kept.

step: one random batch lives in ordinary (pageable) host memory, as
headroom's does; every step copies it to the device (x.to('cuda')), runs
zero_grad, forward, loss, backward, Adam, and reads the loss with .item(),
which synchronises, exactly as hr_train_step(..., &loss) does. The host clock
(perf_counter) around each step gives the median over --steps after
--warmup. The peaks torch.cuda.max_memory_allocated / max_memory_reserved
and the device's used bytes (mem_get_info) are read right after the timed
steps. --benchmark turns cudnn.benchmark on for the whole run (speed runs:
its autotuning may take large workspaces, so its peaks are not PyTorch's
default memory). --memory-first measures both in one process: the peaks
come from --warmup + 5 steps with PyTorch's defaults (cudnn.benchmark off),
then cudnn.benchmark goes on, the peak counters are reset, and the times come
from --warmup + --steps more steps (their peaks are reported as timed_*).
Then, unless --no-extra, for information only (timing, no effect on the peaks
above): the same loop with the batch already on the device, and with
PyTorch's default precision (TF32 convolutions).

--compile: the model through torch.compile (its default mode; the loss and
Adam stay eager), compiled during the warm-up steps (give it a few): the
second PyTorch column issue 12 asks for. The JSON line says "pytorch
compile".

largest: one warm-up step at --batch (Adam's state exists from then on), then
real training steps at other batches, each on a fresh random batch made on
the device, catching torch.cuda.OutOfMemoryError (and other CUDA/cuDNN
failures) and emptying the cache between probes; at most --max-probes probes
and --time-limit seconds. The exact search doubles from --batch, then
bisects to --tol. --halving is Accelerate's find_executable_batch_size: the
first probe is at --start (default 64 x --batch), each failure halves the
batch (after gc and empty_cache), and the first batch that trains a step is
the answer; it is the largest start/2^k that fits, at most 2x below the
exact answer. The probes run in a child process: one that gives no answer
within --probe-timeout seconds is stopped and counted as a failure (seen
with deep_cnn at batch 131072, where a step did not finish in minutes), and
the search goes on in a fresh child (which first repeats the warm-up step).
On SIGTERM (a caller's timeout) the search stops and still prints its line,
with what it found so far and "interrupted".

--device cpu runs step and largest on the CPU (no memory figures): that is
for selftest, which checks the plumbing of every mode on a machine without a
GPU. PyTorch's allocator keeps its default settings throughout.

ONE JSON line goes to stdout.
"""

import argparse
import gc
import json
import math
import os
import signal
import statistics
import sys
import time

torch = nn = build_model = input_shape = None  # imported by load_torch(): the report needs no torch
MODELS = ["mlp", "simple_cnn", "deep_cnn", "vgg16_bn", "resnet18", "resnet20", "mobilenet_v1"]
SUITE = MODELS[3:]  # the standard CNNs: bench/torch_models.py, 3x32x32 inputs


def load_torch():
    global torch, nn, build_model, input_shape
    import torch as t
    import torch.nn as tnn
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    from make_golden import build_model as bm, input_shape as ish
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_models

    def build(name):
        return torch_models.MODELS[name][0]() if name in SUITE else bm(name)

    def shape(name):
        return (3, 32, 32) if name in SUITE else ish(name)
    torch, nn, build_model, input_shape = t, tnn, build, shape


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


# ---- checkpointing per block ---------------------------------------------------------
def is_activation(layer):
    return isinstance(layer, (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid))


def blocks_of(seq):
    """The layers of an nn.Sequential in blocks: a block ends at an activation
    and the parameter-free layers after it; the next layer with parameters
    starts the next block."""
    blocks, cur, act = [], [], False
    for layer in seq:
        if cur and act and any(True for _ in layer.parameters()):
            blocks.append(cur)
            cur, act = [], False
        cur.append(layer)
        act = act or is_activation(layer)
    if cur:
        blocks.append(cur)
    return blocks


def block_names(blocks):
    return ["+".join(type(m).__name__ for m in b) for b in blocks]


def checkpoint_fn():
    """torch.utils.checkpoint.checkpoint, non-reentrant: the reentrant form
    gives no parameter gradients to a first block whose input needs none."""
    from torch.utils.checkpoint import checkpoint
    major, minor = (int("".join(c for c in v if c.isdigit()) or 0) for v in torch.__version__.split(".")[:2])
    if (major, minor) < (1, 11):
        raise SystemExit("torch %s has no use_reentrant=False (PyTorch 1.11 and later)" % torch.__version__)
    return lambda block, x: checkpoint(block, x, use_reentrant=False)


def checkpointed(seq):
    """The same layers (the same parameter objects) in blocks; every block
    but the last runs under torch.utils.checkpoint."""
    ckpt = checkpoint_fn()

    class CheckpointedSequential(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(nn.Sequential(*b) for b in blocks_of(seq))

        def forward(self, x):
            for b in self.blocks[:-1]:
                x = ckpt(b, x)
            return self.blocks[-1](x)

    return CheckpointedSequential()


# ---- one training step -------------------------------------------------------------------
def setup(name, dev, ckpt=False, seed=0):
    """Model (checkpointed per block if ckpt), Adam, loss; and the blocks'
    names, the checkpointed ones first (None without ckpt)."""
    torch.manual_seed(seed)
    model = build_model(name)
    blocks = None
    if ckpt:
        model = checkpointed(model)
        blocks = block_names(model.blocks)
    model = model.to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return model, opt, nn.CrossEntropyLoss(), blocks


def grad_scaler():
    try:  # PyTorch 2.3 and later
        return torch.amp.GradScaler("cuda")
    except (AttributeError, TypeError):
        return torch.cuda.amp.GradScaler()


def make_step(model, opt, lossf, dev, amp):
    """step(x, y) -> the loss as a float: the batch to dev, zero_grad, forward
    and loss (under autocast in amp's type, if any), backward, Adam."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    scaler = grad_scaler() if amp == "fp16" else None

    def step(x, y):
        xb, yb = x.to(dev), y.to(dev)
        opt.zero_grad()
        if dtype is None:
            loss = lossf(model(xb), yb)
            loss.backward()
            opt.step()
            return loss.item()
        with torch.autocast(device_type=dev.type, dtype=dtype):
            loss = lossf(model(xb), yb)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss.item()

    return step


def device_used():
    free, total = torch.cuda.mem_get_info()
    return total - free, total


def cmd_step(a):
    prec = set_precision(False)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    used0 = total = None
    if cuda:
        torch.cuda.init()
        used0, total = device_used()  # the context exists, nothing else
    model, opt, lossf, blocks = setup(a.model, dev, a.checkpoint)
    shp = (a.batch,) + input_shape(a.model)
    x_host = torch.rand(shp) * 2 - 1
    y_host = torch.randint(0, 10, (a.batch,))
    if a.compile:
        model = torch.compile(model)
    step = make_step(model, opt, lossf, dev, a.amp)
    if a.benchmark and not a.memory_first:
        torch.backends.cudnn.benchmark = True

    def timed(x, y):
        for _ in range(a.warmup):
            step(x, y)
        ts, loss = [], None
        for _ in range(a.steps):
            t0 = time.perf_counter()
            loss = step(x, y)
            ts.append((time.perf_counter() - t0) * 1e3)
        return ts, loss

    def peaks():
        if not cuda:
            return None, None, None
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved(), device_used()[0]

    extra = {}
    if a.memory_first:  # the peaks with PyTorch's defaults, then the times with cudnn.benchmark on
        for _ in range(a.warmup + min(a.steps, 5)):
            step(x_host, y_host)
        mem = peaks()
        torch.backends.cudnn.benchmark = True
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        ts, loss = timed(x_host, y_host)
        t = peaks()
        extra = {"timed_max_allocated": t[0], "timed_max_reserved": t[1], "timed_device_used_end": t[2]}
        bench = "timed steps only (peaks from %d steps without it)" % (a.warmup + min(a.steps, 5))
    else:
        ts, loss = timed(x_host, y_host)
        mem = peaks()
        bench = bool(a.benchmark)
    out = {
        "impl": "pytorch compile" if a.compile else "pytorch", "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "precision": ("autocast " + a.amp) if a.amp else prec, "amp": a.amp or "fp32", "cudnn_benchmark": bench,
        "checkpoint": bool(a.checkpoint), "blocks": blocks,
        "model": a.model, "batch": a.batch, "steps": a.steps, "warmup": a.warmup,
        "median_ms": round(statistics.median(ts), 4), "mean_ms": round(statistics.mean(ts), 4),
        "min_ms": round(min(ts), 4), "max_ms": round(max(ts), 4),
        "samples_per_s": round(a.batch / (statistics.median(ts) / 1e3), 1), "loss": loss,
        "max_allocated": mem[0], "max_reserved": mem[1],
        "device_used_after_init": used0, "device_used_end": mem[2], "device_total": total,
    }
    out.update(extra)
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
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    model, opt, lossf, _ = setup(a.model, dev, a.checkpoint)
    step = make_step(model, opt, lossf, dev, a.amp)
    shp = input_shape(a.model)

    def probe(b):
        t0 = time.perf_counter()
        ok, why, x, y = False, "", None, None
        try:
            x = torch.randn((b,) + shp, device=dev)
            y = torch.randint(0, 10, (b,), device=dev)
            v = step(x, y)
            if cuda:
                torch.cuda.synchronize()
            ok = math.isfinite(v)
            why = "" if ok else "loss %r" % v
        except torch.cuda.OutOfMemoryError as e:
            why = "OutOfMemoryError: " + str(e).split("\n")[0][:200]
        except (RuntimeError, MemoryError) as e:
            why = type(e).__name__ + ": " + str(e).split("\n")[0][:200]
        del x, y
        opt.zero_grad(set_to_none=True)
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        return {"batch": b, "ok": ok, "secs": round(time.perf_counter() - t0, 3), "why": why}

    r = probe(a.batch)  # Adam's state exists from here on
    print(json.dumps({"ready": r["ok"], "why": r["why"], "torch": torch.__version__,
                      "device": torch.cuda.get_device_name() if cuda else "cpu"}), flush=True)
    for line in sys.stdin:
        print(json.dumps(probe(int(line))), flush=True)


# ---- the searches: probe(batch) -> bool; res holds what is known so far --------------
def search_exact(probe, seed, tol, out_of_budget, res):
    """Doubling from seed (which trained), then bisection until the gap is
    within tol of the largest that trained."""
    lo, hi = seed, None
    res.update(largest=lo, first_failing=hi)
    while hi is None and not out_of_budget():
        if probe(lo * 2):
            lo *= 2
        else:
            hi = lo * 2
        res.update(largest=lo, first_failing=hi)
    while hi is not None and hi - lo > max(1, int(tol * lo)) and not out_of_budget():
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
        res.update(largest=lo, first_failing=hi)
    res["converged"] = hi is not None and hi - lo <= max(1, int(tol * lo))


def search_halving(probe, start, out_of_budget, res):
    """Accelerate's find_executable_batch_size: start, then halve on every
    failure; the first batch that trains is the answer."""
    b = start
    res.update(largest=0, first_failing=None, converged=False)
    while b >= 1 and not out_of_budget():
        if probe(b):
            res.update(largest=b, converged=True)
            return
        res["first_failing"] = b
        b //= 2


class Interrupted(Exception):
    pass


def on_sigterm(signum, frame):
    raise Interrupted()


def die_with_parent():
    """In the probe child: SIGKILL when the parent dies, so that no orphan
    keeps GPU memory after a caller's timeout kills the parent (Linux)."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def cmd_largest(a):
    """The exact search or --halving; every probe runs in a child process (see
    largest-child), so that a probe that runs past --probe-timeout (cuDNN
    trying engine after engine on a huge shape, say) is stopped and counted
    as a failure, and the search goes on in a fresh child."""
    import select
    import subprocess
    t_start = time.perf_counter()
    probes, info = [], {}
    child = [None]
    flags = ["--device", a.device] + (["--amp", a.amp] if a.amp else []) + (["--checkpoint"] if a.checkpoint else [])

    def start():
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "largest-child", "--model", a.model,
                              "--batch", str(a.batch)] + flags, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, bufsize=1, preexec_fn=die_with_parent)
        r, _, _ = select.select([p.stdout], [], [], 120)
        line = p.stdout.readline() if r else ""
        if not line or not json.loads(line).get("ready"):
            info["start_failed"] = json.loads(line).get("why") if line else "no answer from the child"
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

    start_batch = a.start if a.start else 64 * a.batch
    res = {"largest": 0, "first_failing": None, "converged": False}
    interrupted = None
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        child[0] = start()
        if a.halving:
            if child[0] is not None:  # the warm-up step at --batch ran: Adam's state exists
                search_halving(probe, start_batch, out_of_budget, res)
        elif child[0] is not None:  # the child's first step ran at the seed batch
            search_exact(probe, a.batch, a.tol, out_of_budget, res)
    except Interrupted:
        interrupted = "SIGTERM after %.1f s: the search stopped; largest is what it had found" % (
            time.perf_counter() - t_start)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        stop()
    out = {
        "impl": "pytorch", "mode": "halving" if a.halving else "largest", "torch": info.get("torch"),
        "device": info.get("device"), "model": a.model, "amp": a.amp or "fp32", "checkpoint": bool(a.checkpoint),
        "seed_batch": a.batch, "largest": res["largest"], "first_failing": res["first_failing"],
        "converged": bool(res.get("converged")) and not interrupted,
        "probe_timeout_s": a.probe_timeout, "time_limit_s": a.time_limit, "max_probes": a.max_probes,
        "search_s": round(time.perf_counter() - t_start, 2), "probes": probes,
    }
    if a.halving:
        out["start"] = start_batch
    else:
        out["tol"] = a.tol
    if "start_failed" in info and not probes:
        out["error"] = "the warm-up step at batch %d failed: %s" % (a.batch, info["start_failed"])
    if interrupted:
        out["interrupted"] = interrupted
    print(json.dumps(out))


# ---- the report: tables from gpu_bench.sh's and fit_bench.sh's JSON lines -------------
def mib(b):
    return "%.1f" % (b / 2**20) if isinstance(b, (int, float)) else "-"


def ratio(a, b):
    return "%.2f" % (a / b) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a and b else "-"


def short(model):
    return os.path.basename(str(model or "")).replace(".model", "")


def cmd_report(a):
    rows = []
    for f in a.files:
        rows += [json.loads(line) for line in open(f) if line.strip().startswith("{")]
    by = {}
    for r in rows:
        by.setdefault((r.get("part"), r.get("impl"), short(r.get("model")), r.get("batch", r.get("seed_batch"))), r)
    info = next((r for r in rows if r.get("part") == "info"), {})
    print("GPU: %s, driver %s, torch %s, cuDNN %s, %s" % (info.get("gpu"), info.get("driver"), info.get("torch"),
                                                      info.get("cudnn"), info.get("date")))
    cfgs = [k[2:] for k in by if k[0] == "step" and k[1] == "headroom"]
    if cfgs:
        print()
        print("| model | batch | headroom ms | PyTorch ms | ratio | headroom samples/s | PyTorch samples/s "
              "| PyTorch ms (batch on GPU) | PyTorch ms (TF32 conv) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for model, b in cfgs:
            h, t = by[("step", "headroom", model, b)], by.get(("step", "pytorch", model, b), {})
            print("| %s | %s | %.3f | %s | %s | %.0f | %s | %s | %s |" % (
                model, b, h.get("median_ms", float("nan")), t.get("median_ms", "-"),
                ratio(h.get("median_ms"), t.get("median_ms")), h.get("samples_per_s", 0),
                t.get("samples_per_s", "-"), t.get("device_input_median_ms", "-"), t.get("tf32_conv_median_ms", "-")))
        print()
        print("| model | batch | hr arena MiB | hr alloc delta MiB | hr lazy MiB | hr overhead MiB "
              "| hr device used MiB | torch max_allocated MiB | torch max_reserved MiB | torch device used MiB "
              "| arena / reserved |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for model, b in cfgs:
            h, t = by[("step", "headroom", model, b)], by.get(("step", "pytorch", model, b), {})
            print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                model, b, mib(h.get("arena_bytes")), mib(h.get("alloc_delta")), mib(h.get("lazy_after_alloc")),
                mib(h.get("overhead_bytes")), mib(h.get("device_used_end")), mib(t.get("max_allocated")),
                mib(t.get("max_reserved")), mib(t.get("device_used_end")),
                ratio(h.get("arena_bytes"), t.get("max_reserved"))))
    if any(k[0] == "largest" for k in by):
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
            algos.setdefault((short(r.get("model")), r.get("batch")), {})[r.get("algo")] = r
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
    report_fit(rows)


def cell(r, key, fmt=str):
    """A value, or why there is none: skip (time), err (no result), -."""
    if r is None:
        return "-"
    if "skipped" in r:
        return "skip"
    v = r.get(key)
    if v is None:
        return "err" if "error" in r or "rc" in r else "-"
    return fmt(v)


def ms(v):
    return "%.3f" % v


def listed(v):
    if isinstance(v, list):
        return ",".join(str(x) for x in v) if v else "none"
    return str(v) if v != "" else "none"


def report_fit(rows):
    """fit_bench.sh's tables: the trade-off curve (headroom's recomputation
    to a budget; PyTorch with and without checkpointing), then the largest
    batch each trains."""
    rows = [dict(r, model=short(r.get("model"))) for r in rows if r.get("part") in
            ("curve", "curve_plan", "torch_step", "fit_largest")]
    if not rows:
        return
    models = [m for m in MODELS if any(r["model"] == m for r in rows)]
    last = {}
    for r in rows:  # the later line wins (a second call's result replaces a skip)
        k = (r["part"], r["model"], r.get("prec"), r.get("point"), r.get("variant"))
        if k not in last or "skipped" not in r:
            last[k] = r
    get = lambda part, m, prec=None, point=None, variant=None: last.get((part, m, prec, point, variant))
    curve = [r for r in last.values() if r["part"] in ("curve", "curve_plan")]
    if curve:
        print()
        print("Trade-off curve, headroom (budget: --recompute auto --budget; min: the smallest arena the planner finds)")
        print()
        print("| model | batch | prec | point | budget MiB | plan arena MiB | recomputed | plan: extra ms "
              "| predicted ms | measured ms | x no-recompute | device used MiB |")
        print("|---|---:|---|---|---:|---:|---|---:|---:|---:|---:|---:|")
        for m in models:
            for prec in ("fp32", "bf16"):
                base = get("curve", m, prec, "none")
                for point in ("none", "A0", "0.75", "0.5", "min", "min_mode"):
                    s, p = get("curve", m, prec, point), get("curve_plan", m, prec, point)
                    if not s and not p:
                        continue
                    any_r = s or p
                    arena = (s or {}).get("arena_bytes", (p or {}).get("arena_bytes"))
                    rec = cell(s, "recompute", listed) if s and "recompute" in s else cell(p, "recompute", listed)
                    if p and p.get("fits") is False:
                        rec += " (plan: does not fit)"
                    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                        m, any_r.get("batch"), prec, point, mib(any_r.get("budget_bytes")), mib(arena),
                        rec, cell(p, "recompute_extra_ms", ms), cell(s, "predicted_ms", ms), cell(s, "median_ms", ms),
                        ratio((s or {}).get("median_ms"), (base or {}).get("median_ms")),
                        cell(s, "device_used_end", mib)))
    tsteps = [r for r in last.values() if r["part"] == "torch_step"]
    if tsteps:
        print()
        print("Trade-off, PyTorch (checkpoint: torch.utils.checkpoint per block; times with cudnn.benchmark, "
              "peaks with PyTorch's defaults)")
        print()
        print("| model | batch | variant | ms | x fp32 | max_allocated MiB | max_reserved MiB | device used MiB "
              "| reserved x no checkpoint |")
        print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
        for m in models:
            for v in ("fp32", "fp32_ckpt", "bf16", "bf16_ckpt"):
                r = get("torch_step", m, variant=v)
                if not r:
                    continue
                f32, plain = get("torch_step", m, variant="fp32") or {}, get("torch_step", m,
                                                                              variant=v.split("_")[0]) or {}
                print("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    m, r.get("batch"), v, cell(r, "median_ms", ms), ratio(r.get("median_ms"), f32.get("median_ms")),
                    cell(r, "max_allocated", mib), cell(r, "max_reserved", mib), cell(r, "device_used_end", mib),
                    ratio(r.get("max_reserved"), plain.get("max_reserved"))))
    big = [r for r in last.values() if r["part"] == "fit_largest"]
    if big:
        cols = [("hr_fp32", "hr fp32"), ("hr_min", "hr recompute"), ("hr_bf16", "hr bf16"),
                ("hr_bf16_min", "hr bf16+recompute"), ("torch_fp32", "torch fp32"), ("torch_bf16", "torch bf16"),
                ("torch_fp32_ckpt", "torch fp32 ckpt"), ("torch_bf16_ckpt", "torch bf16 ckpt"),
                ("halving_fp32", "halving fp32"), ("halving_bf16", "halving bf16"), ("hr_chunks", "hr slices"),
                ("hr_bf16_chunks", "hr bf16+slices")]

        def largest(r):
            if r is None or "skipped" in r:
                return None
            return r.get("largest_confirmed", r.get("largest"))

        def shown(r):
            if r is None:
                return "-"
            if "skipped" in r:
                return "skip"
            v = largest(r)
            if v is None:
                return "err"
            if r.get("impl") == "pytorch" and r.get("mode") == "largest" and not r.get("converged"):
                return "≥%d" % v
            return str(v)

        print()
        print("Largest batch that trains one step (hr: planned, then confirmed by a step; torch: exact search; "
              "halving: Accelerate's find_executable_batch_size; ≥: search stopped by its time limit)")
        print()
        print("| model | " + " | ".join(c[1] for c in cols) + " | hr recompute / torch fp32 "
              "| hr bf16+recompute / torch fp32 | hr slices / torch fp32 | hr bf16+slices / torch fp32 |")
        print("|---|" + "---:|" * (len(cols) + 4))
        for m in models:
            got = {c: get("fit_largest", m, variant=c) for c, _ in cols}
            t32 = largest(got["torch_fp32"])
            print("| %s | %s | %s | %s | %s | %s |" % (
                m, " | ".join(shown(got[c]) for c, _ in cols), ratio(largest(got["hr_min"]), t32),
                ratio(largest(got["hr_bf16_min"]), t32), ratio(largest(got["hr_chunks"]), t32),
                ratio(largest(got["hr_bf16_chunks"]), t32)))
        starts = {r["model"]: r.get("start") for r in big if r.get("mode") == "halving"}
        if starts:
            print("\nhalving started at " + ", ".join("%s %s" % (m, s) for m, s in starts.items()))


# ---- selftest (CPU) ----------------------------------------------------------------------
def cmd_selftest(a):
    """On the CPU: the blocks, gradients with and without checkpointing, the
    two searches against a known limit, and every mode end to end."""
    import subprocess
    torch.set_num_threads(1)
    fails = []

    def check(ok, what):
        print("%s  %s" % ("ok  " if ok else "FAIL", what))
        if not ok:
            fails.append(what)

    want = {"mlp": ["Linear+ReLU", "Linear+ReLU", "Linear"],
            "simple_cnn": ["Conv2d+ReLU+MaxPool2d+Flatten", "Linear"],
            "deep_cnn": ["Conv2d+ReLU+MaxPool2d", "Conv2d+ReLU+MaxPool2d", "Conv2d+ReLU+MaxPool2d+Flatten", "Linear"]}
    dev = torch.device("cpu")
    for name in MODELS:
        got = block_names(blocks_of(build_model(name)))
        check(got == want[name], "%s blocks %s" % (name, got))
        for amp in (None, "bf16"):
            # two training steps: the second runs with Adam's state, from weights the first changed
            grads, losses, params = [], [], []
            for ckpt in (False, True):
                model, opt, lossf, _ = setup(name, dev, ckpt, seed=1)
                g = torch.Generator().manual_seed(2)
                x = torch.rand((4,) + input_shape(name), generator=g) * 2 - 1
                y = torch.randint(0, 10, (4,), generator=g)
                step = make_step(model, opt, lossf, dev, amp)
                losses.append([step(x, y), step(x, y)])
                grads.append([p.grad.clone() for p in model.parameters()])
                params.append([p.detach().clone() for p in model.parameters()])
            n = len(grads[0])
            same = n == len(grads[1]) and all(torch.equal(u, v) for u, v in zip(grads[0], grads[1]))
            diff = max(float((u - v).abs().max()) for u, v in zip(grads[0], grads[1]))
            check(same and losses[0] == losses[1] and all(torch.equal(u, v) for u, v in zip(*params)),
                  "%s %s: checkpointed gradients of %d tensors, losses and updated weights bit-identical "
                  "(max |diff| %.3g, losses %s)" % (name, amp or "fp32", n, diff, losses[0]))
    # the checkpoint is really there: the checkpointed blocks save nothing that
    # autograd's hooks see (only the last block's tensors and the loss's remain)
    try:
        from torch.autograd.graph import saved_tensors_hooks
        for name in MODELS:
            counts = []
            for ckpt in (False, True):
                model, _, lossf, _ = setup(name, dev, ckpt)
                saved = []
                with saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
                    lossf(model(torch.rand((2,) + input_shape(name))), torch.tensor([1, 2]))
                counts.append(sum(saved))
            check(counts[1] < counts[0], "%s: elements in autograd's saved tensors: %d without, %d with "
                  "checkpointing" % (name, counts[0], counts[1]))
    except ImportError:
        print("skip  saved-tensor count (torch.autograd.graph.saved_tensors_hooks needs PyTorch 1.10)")

    # the searches against a step that trains up to `limit`
    for limit in (1, 7, 1000, 1023, 1024, 1025, 3000000):
        for seed in (1, 64):
            if seed > limit:
                continue
            res, seen = {}, []
            search_exact(lambda b: seen.append(b) or b <= limit, seed, 0.02, lambda: len(seen) >= 40, res)
            ok = res["converged"] and res["largest"] <= limit < res["first_failing"] and \
                res["first_failing"] - res["largest"] <= max(1, int(0.02 * res["largest"]))
            check(ok, "exact search from %d, limit %d: %d (%d probes)" % (seed, limit, res["largest"], len(seen)))
        for start in (limit, 4 * limit + 3, 1 << 25):
            res, seen = {}, []
            search_halving(lambda b: seen.append(b) or b <= limit, start, lambda: False, res)
            expect = start
            while expect > limit:
                expect //= 2
            check(res["largest"] == expect and 2 * expect > limit and seen[-1] == expect and
                  all(b > limit for b in seen[:-1]),
                  "halving from %d, limit %d: %d after %s" % (start, limit, res["largest"], seen[-4:]))

    # every mode end to end, on the CPU
    me = [sys.executable, os.path.abspath(__file__)]

    def run(args, timeout=300):
        p = subprocess.run(me + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode or len(lines) != 1:
            print(p.stderr[-2000:])
            return {}
        return json.loads(lines[0])

    r = run(["step", "--device", "cpu", "--model", "deep_cnn", "--batch", "8", "--steps", "3", "--warmup", "1",
             "--checkpoint", "--amp", "bf16", "--memory-first", "--no-extra"])
    check(r.get("checkpoint") is True and r.get("amp") == "bf16" and r.get("median_ms", 0) > 0 and
          math.isfinite(r.get("loss", float("nan"))) and len(r.get("blocks") or []) == 4,
          "step --checkpoint --amp bf16 --memory-first: %s ms, blocks %s" % (r.get("median_ms"), r.get("blocks")))
    r = run(["step", "--device", "cpu", "--model", "mlp", "--batch", "16", "--steps", "3", "--warmup", "1"])
    check(r.get("checkpoint") is False and r.get("median_ms", 0) > 0 and "tf32_conv_median_ms" in r,
          "step (fp32, with the extra variants): %s ms" % r.get("median_ms"))
    r = run(["largest", "--device", "cpu", "--model", "mlp", "--batch", "8", "--max-probes", "3", "--checkpoint",
             "--amp", "bf16"])
    check(r.get("mode") == "largest" and r.get("largest") == 64 and len(r.get("probes", [])) == 3 and
          r.get("checkpoint") is True and not r.get("converged"),
          "largest (3 probes, bf16, checkpoint): %s, probes %s" % (r.get("largest"),
                                                                  [p["batch"] for p in r.get("probes", [])]))
    r = run(["largest", "--halving", "--device", "cpu", "--model", "simple_cnn", "--batch", "4", "--start", "32"])
    check(r.get("mode") == "halving" and r.get("largest") == 32 and r.get("converged") and r.get("start") == 32,
          "largest --halving from 32: %s" % r.get("largest"))
    # a probe past --probe-timeout: counted as a failure, the search goes on in a fresh child
    r = run(["largest", "--device", "cpu", "--model", "deep_cnn", "--batch", "8", "--max-probes", "3",
             "--probe-timeout", "0.001"])
    pr = r.get("probes", [])
    check(len(pr) == 3 and all(not p["ok"] and p["why"].startswith("timeout") for p in pr) and
          r.get("largest") == 8, "probe timeouts: %s" % [p["why"][:24] for p in pr])
    # SIGTERM: the line still comes, with what was found
    p = subprocess.Popen(me + ["largest", "--device", "cpu", "--model", "mlp", "--batch", "4", "--tol", "0",
                               "--max-probes", "1000", "--time-limit", "1000"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    time.sleep(8)
    p.terminate()
    out = p.communicate(timeout=60)[0]
    r = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    check(bool(r.get("interrupted")) and r.get("largest", 0) >= 4 and not r.get("converged"),
          "SIGTERM mid-search: largest %s after %d probes" % (r.get("largest"), len(r.get("probes", []))))
    print("\n%s" % ("all passed" if not fails else "%d FAILED" % len(fails)))
    sys.exit(1 if fails else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--model", choices=MODELS, required=True)
        p.add_argument("--batch", type=int, required=True)
        p.add_argument("--amp", choices=["bf16", "fp16"], help="torch.autocast in this type (fp16: with GradScaler)")
        p.add_argument("--checkpoint", action="store_true", help="torch.utils.checkpoint per block (see above)")
        p.add_argument("--device", default="cuda", help="cuda, or cpu for the self-test (no memory figures)")

    s = sub.add_parser("step")
    common(s)
    s.add_argument("--steps", type=int, default=20)
    s.add_argument("--warmup", type=int, default=5)
    s.add_argument("--no-extra", action="store_true", help="skip the informational variants")
    s.add_argument("--benchmark", action="store_true", help="cudnn.benchmark = True (speed runs)")
    s.add_argument("--compile", action="store_true", help="torch.compile (default mode) over the model")
    s.add_argument("--memory-first", action="store_true",
                   help="peaks with PyTorch's defaults, then times with cudnn.benchmark on")
    g = sub.add_parser("largest")
    common(g)
    g.add_argument("--halving", action="store_true", help="Accelerate's find_executable_batch_size from --start")
    g.add_argument("--start", type=int, help="--halving's first batch (default 64 x --batch)")
    g.add_argument("--max-probes", type=int, default=22)
    g.add_argument("--time-limit", type=float, default=120)
    g.add_argument("--tol", type=float, default=0.02)
    g.add_argument("--probe-timeout", type=float, default=30)
    c = sub.add_parser("largest-child")
    common(c)
    r = sub.add_parser("report")
    r.add_argument("files", nargs="+")
    sub.add_parser("selftest")
    a = ap.parse_args()
    if a.cmd in ("step", "largest-child", "selftest"):
        load_torch()
    {"step": cmd_step, "largest": cmd_largest, "largest-child": cmd_largest_child, "report": cmd_report,
     "selftest": cmd_selftest}[a.cmd](a)


if __name__ == "__main__":
    main()
