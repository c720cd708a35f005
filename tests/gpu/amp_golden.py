#!/usr/bin/env python3
"""amp_golden.py — PyTorch's side of tests/gpu/test_amp_golden.c: for each seed
model and each half type, the same first step and 100 steps that headroom ran
(the initial weights and batches of scripts/make_golden.py's generator, seed
1234), in PyTorch autocast on the GPU (fp16 with torch.amp.GradScaler), and
the first step once more in float64 as the reference.

    python3 tests/gpu/amp_golden.py DIR     (DIR: what test_amp_golden wrote)

Bounds (each tensor by its largest magnitude, e = max|a - ref64| / max|ref64|):
  - the first loss and every first gradient: headroom's error against float64
    is at most 2x PyTorch autocast's own error against float64, or 4 units of
    the half type's rounding (bf16: 4 * 2^-8, fp16: 4 * 2^-11), whichever is
    larger. Both round the same products' inputs to the half type; they may
    differ in summation order and in where they round, not in kind.
  - the 100-step curve: every step's loss within 10% + 0.05 of PyTorch's, and
    the mean of the last 20 within 5% (the trajectories separate slowly, as
    two fp32 runs with different summation orders do).
  - fp16: the steps GradScaler skips are the steps headroom skips.
Prints a table and "RESULT tests/gpu/amp_golden.py P F".
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import hr_rng  # noqa: E402
from make_golden import build_model, hr_init  # noqa: E402

SEED, STEPS = 1234, 100
MODELS = {"mlp": (64, (1000,)), "simple_cnn": (32, (3, 32, 32)), "deep_cnn": (16, (3, 64, 64))}
UNIT = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}
passed = failed = 0


def check(ok, msg):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL " + msg)


def batch(k, n, shape):
    sx, sy = (100 + k, 300 + k) if k else (1, 2)
    x = hr_rng.symmetric(SEED, sx, n * int(np.prod(shape))).reshape((n,) + shape)
    y = hr_rng.labels(SEED, sy, n, 10)
    return torch.from_numpy(x), torch.from_numpy(y).long()


def model_for(name, dtype=torch.float32):
    m = build_model(name)
    hr_init(m, SEED)
    return m.to("cuda", dtype)


def first_step(name, prec):
    """(loss, {param: grad}) of PyTorch autocast, and of float64."""
    n, shape = MODELS[name]
    x, y = batch(0, n, shape)
    x, y = x.cuda(), y.cuda()
    lossf = torch.nn.CrossEntropyLoss()
    m = model_for(name)
    dt = torch.bfloat16 if prec == "bf16" else torch.float16
    with torch.autocast("cuda", dtype=dt):
        loss = lossf(m(x), y)
    if prec == "fp16":  # scaled as GradScaler scales it, then unscaled
        (loss.float() * 65536.0).backward()
        grads = {k: (p.grad.float() / 65536.0).cpu().numpy() for k, p in m.named_parameters()}
    else:
        loss.backward()
        grads = {k: p.grad.float().cpu().numpy() for k, p in m.named_parameters()}
    m64 = model_for(name, torch.float64)
    l64 = lossf(m64(x.double()), y)
    l64.backward()
    g64 = {k: p.grad.cpu().numpy() for k, p in m64.named_parameters()}
    return float(loss), grads, float(l64), g64


def curve(name, prec):
    n, shape = MODELS[name]
    m = model_for(name)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda") if prec == "fp16" else None
    dt = torch.bfloat16 if prec == "bf16" else torch.float16
    lossf = torch.nn.CrossEntropyLoss()
    losses, skipped = [], []
    for k in range(STEPS):
        x, y = batch(k, n, shape)
        x, y = x.cuda(), y.cuda()
        opt.zero_grad()
        with torch.autocast("cuda", dtype=dt):
            loss = lossf(m(x), y)
        if scaler:
            before = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            skipped.append(scaler.get_scale() < before)
        else:
            loss.backward()
            opt.step()
            skipped.append(False)
        losses.append(float(loss))
    return np.array(losses), np.array(skipped)


def err(a, ref):
    return float(np.max(np.abs(a.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def main():
    root = sys.argv[1]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print("%-11s %5s %12s %12s %12s %12s %9s %9s" % ("model", "prec", "loss err hr", "loss err pt", "grad err hr",
                                                      "grad err pt", "curve max", "last20"))
    for name in MODELS:
        for prec in ("bf16", "fp16"):
            d = os.path.join(root, "%s_%s" % (name, prec))
            if not os.path.exists(os.path.join(d, "curve.f32")):
                check(False, "%s %s: headroom wrote nothing to %s" % (name, prec, d))
                continue
            hr_curve = np.fromfile(os.path.join(d, "curve.f32"), dtype=np.float32)
            hr_skip = np.fromfile(os.path.join(d, "skipped.f32"), dtype=np.float32) != 0
            lpt, gpt, l64, g64 = first_step(name, prec)
            floor = 4 * UNIT[prec]
            le_hr, le_pt = abs(hr_curve[0] - l64) / abs(l64), abs(lpt - l64) / abs(l64)
            check(le_hr <= max(2 * le_pt, floor), "%s %s: first loss %.6f, float64 %.6f, PyTorch autocast %.6f"
                  % (name, prec, hr_curve[0], l64, lpt))
            worst_hr = worst_pt = 0.0
            for k, ref in g64.items():
                f = os.path.join(d, "grad.%s.f32" % k)
                if not os.path.exists(f):
                    check(False, "%s %s: no gradient %s from headroom" % (name, prec, k))
                    continue
                g = np.fromfile(f, dtype=np.float32).reshape(ref.shape)
                e_hr, e_pt = err(g, ref), err(gpt[k], ref)
                worst_hr, worst_pt = max(worst_hr, e_hr), max(worst_pt, e_pt)
                check(e_hr <= max(2 * e_pt, floor), "%s %s: gradient %s error %.3g against float64; PyTorch "
                      "autocast's %.3g; bound %.3g" % (name, prec, k, e_hr, e_pt, max(2 * e_pt, floor)))
            pt_curve, pt_skip = curve(name, prec)
            dev = np.abs(hr_curve - pt_curve)
            check(bool(np.all(dev <= 0.1 * pt_curve + 0.05)), "%s %s: a step's loss is off PyTorch's by more than 10%% "
                  "+ 0.05 (worst at step %d: %.4f vs %.4f)" % (name, prec, int(np.argmax(dev)), hr_curve[np.argmax(dev)],
                                                               pt_curve[np.argmax(dev)]))
            last = abs(hr_curve[-20:].mean() - pt_curve[-20:].mean()) / pt_curve[-20:].mean()
            check(last <= 0.05, "%s %s: the last 20 steps' mean loss %.4f vs PyTorch's %.4f" % (
                name, prec, hr_curve[-20:].mean(), pt_curve[-20:].mean()))
            if prec == "fp16":
                check(bool(np.array_equal(hr_skip, pt_skip)), "%s fp16: skipped steps differ: headroom %s, GradScaler %s"
                      % (name, np.nonzero(hr_skip)[0].tolist(), np.nonzero(pt_skip)[0].tolist()))
            print("%-11s %5s %12.3g %12.3g %12.3g %12.3g %9.4f %9.4f" % (name, prec, le_hr, le_pt, worst_hr, worst_pt,
                                                                       float(dev.max()), last))
    print("RESULT tests/gpu/amp_golden.py %d %d" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
