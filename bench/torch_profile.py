"""torch_profile.py — where PyTorch's GPU time goes in one training step.

    python3 bench/torch_profile.py --model deep_cnn --batch 64 [--benchmark]

Runs the same step as bench/torch_gpu.py (fp32 IEEE, Adam 1e-3,
CrossEntropyLoss, batch from pageable host memory), 10 warm-up steps, then
profiles 10 steps with torch.profiler and prints each GPU kernel's time per
step (microseconds, the mean over the profiled steps), biggest first, and the
sum. --benchmark sets torch.backends.cudnn.benchmark (cuDNN's own timing of
its algorithms) to compare with its heuristics (the default).
"""
import argparse
import collections
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="deep_cnn")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--benchmark", action="store_true")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--top", type=int, default=40, help="the kernels printed, longest first")
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_gpu as tg
    tg.load_torch()
    torch = tg.torch
    tg.set_precision(False)
    torch.backends.cudnn.benchmark = a.benchmark
    dev = torch.device("cuda")
    model, opt, lossf, _ = tg.setup(a.model, dev)
    x = torch.rand((a.batch,) + tg.input_shape(a.model)) * 2 - 1
    y = torch.randint(0, 10, (a.batch,))

    def step():
        xb, yb = x.to(dev), y.to(dev)
        opt.zero_grad()
        loss = lossf(model(xb), yb)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(10):
        step()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    per = collections.defaultdict(float)
    count = collections.Counter()
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
            count[ev.name] += 1
    total = sum(per.values()) / a.steps
    print("pytorch %s b%d cudnn.benchmark=%s cudnn %s: GPU kernel time per step %.1f us" %
          (a.model, a.batch, a.benchmark, torch.backends.cudnn.version(), total))
    for name, t in sorted(per.items(), key=lambda kv: -kv[1])[:a.top]:
        print("%9.1f us  x%-3d %s" % (t / a.steps, count[name] // a.steps, name[:150]))


if __name__ == "__main__":
    main()
