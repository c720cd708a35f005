#!/usr/bin/python3
"""make_golden_ops.py — reference values from PyTorch (CPU, float32, one thread)
for the ops that no seed model uses: GELU (erf and tanh), SiLU, Sigmoid, Tanh,
LeakyReLU, LayerNorm, and Conv2d with groups and dilation (CONV_CASES),
forward and backward, into tests/golden/ops.safetensors (read by
tests/test_golden_ops.c).

    /usr/bin/python3 scripts/make_golden_ops.py                 # writes tests/golden/ops.safetensors
    /usr/bin/python3 scripts/make_golden_ops.py --out /tmp/g    # elsewhere

Inputs are not stored: x, the upstream gradient dy and LayerNorm's weight and
bias come from the shared counter-based RNG (scripts/hr_rng.py, seed 1234), on
the streams listed in CASES; the C test draws the same values. docs/golden.md
("Single ops") is the contract. Unless --no-f64 is given, every case is redone
in float64 from the same inputs and the float32-vs-float64 error of each stored
tensor is printed: the measured basis of the C test's tolerances.

The "nf_" cases feed NaN, +-inf, -0 and float32's extremes through the ops
whose kernels compare values (ReLU, LeakyReLU, MaxPool2d, Softmax and
LogSoftmax) and the smooth activations: their inputs are fixed lists (NF_CASES),
stored with the results ("<case>.x", "<case>.dy"), since no RNG draws them.
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

# Conv2d with groups and dilation: name, x (N, C, H, W), out_channels,
# kernel_size, stride, padding, dilation, groups, bias, first stream s.
# x = 2u-1 on s, weight (K, C/groups, k, k) = (2u-1)/2 on s+1, bias = 2u-1 on
# s+2, dy = 2u-1 on s+3. Stored: y, dx, dweight, dbias (with a bias).
CONV_CASES = [
    ("conv_g2", (2, 4, 7, 7), 6, 3, 1, 1, 1, 2, True, 3200),
    ("conv_dw", (2, 8, 9, 9), 8, 3, 1, 1, 1, 8, True, 3210),
    ("conv_dw_x2", (2, 4, 8, 8), 8, 3, 2, 1, 1, 4, False, 3220),
    ("conv_dil2", (2, 3, 11, 10), 5, 3, 2, 2, 2, 1, True, 3230),
    ("conv_dw_dil2", (2, 6, 9, 9), 6, 3, 1, 2, 2, 6, True, 3240),
    ("conv_g3_dil3", (2, 6, 10, 10), 9, 2, 1, 1, 3, 3, True, 3250),
]


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


def run_conv_case(case, dtype):
    """The conv case's stored tensors (name -> tensor), computed in dtype."""
    name, xs, K, k, stride, pad, dil, groups, bias, s = case
    x = draw(s, xs, 1).to(dtype).requires_grad_(True)
    w = draw(s + 1, (K, xs[1] // groups, k, k), 0.5).to(dtype).requires_grad_(True)
    b = draw(s + 2, (K,), 1).to(dtype).requires_grad_(True) if bias else None
    y = F.conv2d(x, w, b, stride=stride, padding=pad, dilation=dil, groups=groups)
    dy = draw(s + 3, tuple(y.shape), 1).to(dtype)
    y.backward(dy)
    out = {"y": y.detach(), "dx": x.grad, "dweight": w.grad}
    if bias:
        out["dbias"] = b.grad
    return out


# ---- non-finite inputs -------------------------------------------------------
NAN, INF = float("nan"), float("inf")
NEG_NAN = np.array([0xFFC00000], dtype=np.uint32).view(np.float32)[0]  # NaN with the sign bit set
# 39 values (a mask's last byte partly used): NaN, +-inf, -0, denormals,
# float32's largest, GELU's and SiLU's overflow points, ordinary values
NF_ACT_X = [NAN, INF, -INF, -0.0, 0.0, 1.5, -2.0, NEG_NAN, 3e38, -3e38, 1e-40, -1e-40, 88.0,
            -88.0, 100.0, -100.0, 0.25, -0.25, INF, -INF, NAN, 4.0, -4.0, 1e10, -1e10, 20.0, -20.0,
            9.0, -9.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0, 7.0, -7.0, NAN, 65504.0]
# dy: NaN where ReLU's x < 0 (ReLU passes 0, not NaN * 0), inf where x = -inf,
# -inf where x > 0
NF_ACT_DY = [0.5 * ((i % 7) - 3) + 0.125 for i in range(39)]
NF_ACT_DY[6], NF_ACT_DY[2], NF_ACT_DY[5], NF_ACT_DY[0] = NAN, INF, -INF, 0.75

# Softmax rows: a NaN, +inf (inf - inf: NaN), -inf (exp: 0), all -inf, two +inf, plain
NF_SM_X = [[NAN, 1.0, 2.0, 3.0, 4.0], [1.0, 2.0, INF, 3.0, 4.0], [-INF, 1.0, 2.0, 3.0, 4.0],
           [-INF, -INF, -INF, -INF, -INF], [INF, INF, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0, 5.0]]
NF_SM_DY = [[0.25 * ((i * 5 + j) % 9) - 1.0 for j in range(5)] for i in range(6)]

# MaxPool2d(2), six windows a plane: one NaN; two NaNs (the last wins); all
# -inf; inf and NaN; a tie; two +inf / -NaN first; a tie of zeros; four NaNs;
# the extremes
NF_MP2_X = [[[[1.0, NAN, NAN, 5.0, -INF, -INF],
              [3.0, 2.0, NAN, 2.0, -INF, -INF],
              [INF, 1.0, 4.0, 4.0, INF, INF],
              [NAN, INF, 4.0, 4.0, 1.0, 2.0]],
             [[NEG_NAN, 1.0, 1.0, 2.0, -1.0, -2.0],
              [2.0, 3.0, 3.0, NAN, -3.0, -INF],
              [0.0, -0.0, NAN, NAN, 1e38, -INF],
              [0.0, 0.0, NAN, NAN, 3e38, 2.0]]]]


def nf_mp3_x():
    """MaxPool2d(3, 2) on 7x7: overlapping windows; a NaN on a shared corner
    (2, 2) is in four windows, the others in two and one; three windows hold
    none (ties among the rest)."""
    x = [[float((i * 7 + j * 3) % 11 - 5) for j in range(7)] for i in range(7)]
    for (i, j) in [(2, 2), (4, 1), (6, 6)]:
        x[i][j] = NAN
    x[3][3], x[1][1], x[5][6] = INF, -INF, -INF
    return [[x]]


# MaxPool2d(2, 1) on 4x4: each value in up to four windows (PyTorch's gradient
# of a shared NaN sums over them)
NF_MP21_X = [[[[1.0, 2.0, NAN, 0.5], [4.0, NAN, 6.0, -1.0], [7.0, 8.0, 9.0, INF], [-INF, -INF, NAN, 3.0]]]]

# name, op, x, dy (None: 1, 2, 3, ... in y's shape), arguments
NF_CASES = [
    ("nf_relu", "relu", NF_ACT_X, NF_ACT_DY, {}),
    ("nf_leaky_relu_0.1", "leaky_relu", NF_ACT_X, NF_ACT_DY, {"negative_slope": 0.1}),
    ("nf_gelu", "gelu", NF_ACT_X, NF_ACT_DY, {"approximate": "none"}),
    ("nf_gelu_tanh", "gelu", NF_ACT_X, NF_ACT_DY, {"approximate": "tanh"}),
    ("nf_silu", "silu", NF_ACT_X, NF_ACT_DY, {}),
    ("nf_sigmoid", "sigmoid", NF_ACT_X, NF_ACT_DY, {}),
    ("nf_tanh", "tanh", NF_ACT_X, NF_ACT_DY, {}),
    ("nf_softmax", "softmax", NF_SM_X, NF_SM_DY, {}),
    ("nf_log_softmax", "log_softmax", NF_SM_X, NF_SM_DY, {}),
    ("nf_maxpool_2", "max_pool2d", NF_MP2_X, None, {"k": 2, "s": 2}),
    ("nf_maxpool_3s2", "max_pool2d", nf_mp3_x(), None, {"k": 3, "s": 2}),
    ("nf_maxpool_2s1", "max_pool2d", NF_MP21_X, None, {"k": 2, "s": 1}),
]
NF_ACT_SHAPE = (3, 13)


def run_nf_case(case):
    """The case's stored tensors: x, dy, y, dx (float32)."""
    name, op, xv, dyv, args = case
    x = torch.tensor(np.array(xv, dtype=np.float32))
    if x.dim() == 1:
        x = x.reshape(NF_ACT_SHAPE)
    x.requires_grad_(True)
    if op == "relu":
        y = torch.relu(x)
    elif op == "leaky_relu":
        y = F.leaky_relu(x, args["negative_slope"])
    elif op == "gelu":
        y = F.gelu(x, approximate=args["approximate"])
    elif op == "silu":
        y = F.silu(x)
    elif op == "sigmoid":
        y = torch.sigmoid(x)
    elif op == "tanh":
        y = torch.tanh(x)
    elif op == "softmax":
        y = F.softmax(x, dim=1)
    elif op == "log_softmax":
        y = F.log_softmax(x, dim=1)
    elif op == "max_pool2d":
        y = F.max_pool2d(x, args["k"], args["s"])
    else:
        raise ValueError(op)
    if dyv is None:
        dy = torch.arange(1, y.numel() + 1, dtype=torch.float32).reshape(y.shape)
    else:
        dy = torch.tensor(np.array(dyv, dtype=np.float32)).reshape(y.shape)
    y.backward(dy)
    return {"x": x.detach(), "dy": dy, "y": y.detach(), "dx": x.grad}


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

    for case in CONV_CASES:
        name = case[0]
        recs.append((name + ".x_head", draw(case[-1], case[1], 1).reshape(-1)[:X_HEAD].numpy()))
        r32 = run_conv_case(case, torch.float32)
        for k, v in r32.items():
            recs.append(("%s.%s" % (name, k), v.numpy().astype(np.float32)))
        if not args.no_f64:
            r64 = run_conv_case(case, torch.float64)
            for k, v in r32.items():
                a, b = v.to(torch.float64), r64[k]
                scale = b.abs().max().item() or 1.0
                report.append(("%s.%s" % (name, k), v.numel(), (a - b).abs().max().item() / scale))

    for case in NF_CASES:
        for k, v in run_nf_case(case).items():
            recs.append(("%s.%s" % (case[0], k), v.numpy().astype(np.float32)))

    path = os.path.join(args.out, "ops.safetensors")
    meta = {"seed": SEED, "torch": torch.__version__, "layernorm_eps": LN_EPS,
            "generator": "scripts/make_golden_ops.py", "contract": "docs/golden.md"}
    write_safetensors(path, recs, meta)
    _, back = read_safetensors(path)
    for k, a in recs:
        assert np.array_equal(back[k].view(np.uint32), a.view(np.uint32)), k  # NaNs too
    print("== %s (%d bytes, %d tensors)" % (os.path.relpath(path), os.path.getsize(path), len(recs)))
    for k, a in recs:
        f = a[np.isfinite(a)].astype(np.float64)  # the finite values' statistics
        nf = "" if f.size == a.size else "  (%d NaN, %d inf)" % (np.isnan(a).sum(), np.isinf(a).sum())
        if not f.size:
            f = np.zeros(1)
        print("  %-36s %-14s min % .6g max % .6g  mean|.| %.4g%s"
              % (k, list(a.shape), f.min(), f.max(), np.abs(f).mean(), nf))
    if report:
        print("  -- float32 vs float64: max|a-b| / max|b| (nmax)")
        for k, n, e in report:
            print("  %-36s %6d %10.2e" % (k, n, e))


if __name__ == "__main__":
    main()
