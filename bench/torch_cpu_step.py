#!/usr/bin/python3
"""torch_cpu_step.py — the PyTorch baseline for one training step of a seed model.

    /usr/bin/python3 bench/torch_cpu_step.py --model mlp --batch 1024 --threads 2 --steps 10 --warmup 3

Builds the seed model (the same nn.Sequential as scripts/make_golden.py), Adam
(lr 1e-3), CrossEntropyLoss, one random batch (normal inputs, uniform labels),
runs W warm-up steps, then times K steps (zero_grad, forward, loss, backward,
step) one by one with time.perf_counter. Prints ONE JSON line on stdout:
median/mean/min/max step time in ms and samples/s (batch / median). With
--device cuda every step is followed by torch.cuda.synchronize() and the
peak allocated memory is reported too.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from make_golden import build_model, input_shape  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["mlp", "simple_cnn", "deep_cnn"], required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"

    model = build_model(args.model).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lossf = nn.CrossEntropyLoss()
    x = torch.randn((args.batch,) + input_shape(args.model), device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)

    def step():
        opt.zero_grad()
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    loss = None
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)

    med = statistics.median(times)
    out = {
        "bench": "torch_cpu_step" if not cuda else "torch_step",
        "framework": "pytorch",
        "torch": torch.__version__,
        "device": args.device if not cuda else torch.cuda.get_device_name(),
        "model": args.model,
        "batch": args.batch,
        "threads": args.threads,
        "steps": args.steps,
        "warmup": args.warmup,
        "params": sum(p.numel() for p in model.parameters()),
        "median_ms": round(med, 4),
        "mean_ms": round(statistics.mean(times), 4),
        "min_ms": round(min(times), 4),
        "max_ms": round(max(times), 4),
        "samples_per_s": round(args.batch / (med / 1e3), 2),
        "last_loss": float(loss.item()) if loss is not None else None,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    if cuda:
        out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
