#!/usr/bin/python3
"""make_golden_ops.py — reference values from PyTorch (CPU, float32, one thread)
for the ops that no seed model uses: GELU (erf and tanh), SiLU, Sigmoid, Tanh,
LeakyReLU and LayerNorm, forward and backward, into tests/golden/ops.safetensors
(read by tests/test_golden_ops.c).

    /usr/bin/python3 scripts/make_golden_ops.py                 # writes tests/golden/ops.safetensors
    /usr/bin/python3 scripts/make_golden_ops.py --out /tmp/g    # elsewhere

Inputs are not stored: x, the upstream gradient dy and LayerNorm's weight and
bias come from the shared counter-based RNG (scripts/hr_rng.py, seed 1234), on
the streams listed in CASES; the C test draws the same values. docs/golden.md
("Single ops") is the contract. Unless --no-f64 is given, every case is redone
in float64 from the same inputs and the float32-vs-float64 error of each stored
tensor is printed: the measured basis of the C test's tolerances.
"""

import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hr_rng  # noqa: E402
from make_golden import read_safetensors, write_safetensors  # noqa: E402

SEED = 1234
X_HEAD = 16  # values of x stored per case ("<case>.x_head"), to check the C side's draw

# Every case: name, op, x's shape, the op's arguments, its first RNG stream s.
# Streams: x on s, dy on s+1, LayerNorm's weight on s+2 and bias on s+3.
# x = 4*(2u-1) (exact in float32, in [-4, 4)); dy, weight, bias = 2u-1.
# tests/test_golden_ops.c holds the same table; keep the two in step.
ACT = (31, 49)        # 1519 values (odd: LeakyReLU's mask ends in a part byte)
LN1 = (4, 16, 24)     # LayerNorm over the last dim: 64 rows of 24
LN2 = (8, 12, 20)     # LayerNorm over the last two dims: 8 rows of 240
CASES = [
    ("gelu", "gelu", ACT, {"approximate": "none"}, 3000),
    ("gelu_tanh", "gelu", ACT, {"approximate": "tanh"}, 3010),
    ("silu", "silu", ACT, {}, 3020),
    ("sigmoid", "sigmoid", ACT, {}, 3030),
    ("tanh", "tanh", ACT, {}, 3040),
    ("leaky_relu_0.01", "leaky_relu", ACT, {"negative_slope": 0.01}, 3050),
    ("leaky_relu_0.2", "leaky_relu", ACT, {"negative_slope": 0.2}, 3060),
    ("layernorm_last1", "layer_norm", LN1, {"dims": 1, "affine": True, "bias": True}, 3100),
    ("layernorm_last1_noaffine", "layer_norm", LN1, {"dims": 1, "affine": False, "bias": False}, 3110),
    ("layernorm_last1_nobias", "layer_norm", LN1, {"dims": 1, "affine": True, "bias": False}, 3120),
    ("layernorm_last2", "layer_norm", LN2, {"dims": 2, "affine": True, "bias": True}, 3130),
    ("layernorm_last2_noaffine", "layer_norm", LN2, {"dims": 2, "affine": False, "bias": False}, 3140),
    ("layernorm_last2_nobias", "layer_norm", LN2, {"dims": 2, "affine": True, "bias": False}, 3150),
]
LN_EPS = 1e-5  # nn.LayerNorm's default


def draw(stream, shape, scale):
    n = int(np.prod(shape))
    v = hr_rng.symmetric(SEED, stream, n)
    if scale != 1:
        v = v * np.float32(scale)  # a power of two: exact
    return torch.from_numpy(v.astype(np.float32)).reshape(shape)


def run_case(case, dtype):
    """The case's stored tensors (name -> tensor), computed in dtype."""
    name, op, shape, args, s = case
    x = draw(s, shape, 4).to(dtype).requires_grad_(True)
    dy = draw(s + 1, shape, 1).to(dtype)
    out = {}
    if op == "layer_norm":
        ns = list(shape[-args["dims"]:])
        w = draw(s + 2, ns, 1).to(dtype).requires_grad_(True) if args["affine"] else None
        b = draw(s + 3, ns, 1).to(dtype).requires_grad_(True) if args["affine"] and args["bias"] else None
        y = F.layer_norm(x, ns, w, b, LN_EPS)
        with torch.no_grad():
            _, mean, rstd = torch.native_layer_norm(x, ns, w, b, LN_EPS)
        y.backward(dy)
        out["y"], out["dx"] = y.detach(), x.grad
        out["mean"], out["rstd"] = mean.reshape(-1), rstd.reshape(-1)
        if w is not None:
            out["dweight"] = w.grad
        if b is not None:
            out["dbias"] = b.grad
    else:
        if op == "gelu":
            y = F.gelu(x, approximate=args["approximate"])
        elif op == "silu":
            y = F.silu(x)
        elif op == "sigmoid":
            y = torch.sigmoid(x)
        elif op == "tanh":
            y = torch.tanh(x)
        elif op == "leaky_relu":
            y = F.leaky_relu(x, args["negative_slope"])
        else:
            raise ValueError(op)
        y.backward(dy)
        out["y"], out["dx"] = y.detach(), x.grad
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
    ap.add_argument("--no-f64", action="store_true", help="skip the float64 error report")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    recs = []
    report = []
    for case in CASES:
        name, op, shape, _, _ = case
        x = draw(case[4], shape, 4)
        recs.append((name + ".x_head", x.reshape(-1)[:X_HEAD].numpy()))
        r32 = run_case(case, torch.float32)
        for k, v in r32.items():
            recs.append(("%s.%s" % (name, k), v.numpy().astype(np.float32)))
        if not args.no_f64:
            r64 = run_case(case, torch.float64)
            for k, v in r32.items():
                a, b = v.to(torch.float64), r64[k]
                scale = b.abs().max().item() or 1.0
                report.append(("%s.%s" % (name, k), v.numel(), (a - b).abs().max().item() / scale))

    path = os.path.join(args.out, "ops.safetensors")
    meta = {"seed": SEED, "torch": torch.__version__, "layernorm_eps": LN_EPS,
            "generator": "scripts/make_golden_ops.py", "contract": "docs/golden.md"}
    write_safetensors(path, recs, meta)
    _, back = read_safetensors(path)
    for k, a in recs:
        assert np.array_equal(back[k], a), k
    print("== %s (%d bytes, %d tensors)" % (os.path.relpath(path), os.path.getsize(path), len(recs)))
    for k, a in recs:
        print("  %-36s %-14s min % .6g max % .6g  mean|.| %.4g"
              % (k, list(a.shape), a.min(), a.max(), np.abs(a).mean()))
    if report:
        print("  -- float32 vs float64: max|a-b| / max|b| (nmax)")
        for k, n, e in report:
            print("  %-36s %6d %10.2e" % (k, n, e))


if __name__ == "__main__":
    main()
