#!/usr/bin/python3
"""make_golden.py — reference values from PyTorch (CPU, float32, one thread) for
headroom's C tests: tests/golden/<model>.safetensors for the three seed models.

    /usr/bin/python3 scripts/make_golden.py            # all three models
    /usr/bin/python3 scripts/make_golden.py --model mlp --out /tmp/g

Weights and inputs are not stored: both sides generate them from the shared
counter-based RNG in scripts/hr_rng.py. docs/golden.md is the contract (the RNG,
which tensors are stored, the sampling rule, the optimizers' exact update rules
and the tolerances the C tests should use).

Unless --no-f64 is given, every quantity is also computed in float64 from the
same initial values, and the float32-vs-float64 error of each stored tensor is
printed: that is the measured basis of the tolerances in docs/golden.md.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hr_rng  # noqa: E402

SEED = 1234
STREAM_X = 1
STREAM_LABELS = 2
STREAM_PARAM0 = 1000  # parameter k (state_dict order) uses stream 1000 + k
CLASSES = 10

X_HEAD = 4096         # elements of x stored ("x_head")
INIT_HEAD = 1024      # elements of each initial parameter stored ("init.<p>_head")
FULL_MAX = 65536      # tensors up to this many elements are stored in full
N_SAMPLE = 4096       # otherwise this many samples at stride numel // N_SAMPLE
STEPS = 5

BATCH = {"mlp": 64, "simple_cnn": 32, "deep_cnn": 16}


# --------------------------------------------------------------------------
# the seed models (also imported by bench/torch_cpu_step.py)

def build_model(name):
    if name == "mlp":
        return nn.Sequential(
            nn.Linear(1000, 2000), nn.ReLU(),
            nn.Linear(2000, 1000), nn.ReLU(),
            nn.Linear(1000, 10))
    if name == "simple_cnn":
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * 16 * 16, 10))
    if name == "deep_cnn":
        return nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(128 * 8 * 8, 10))
    raise ValueError("unknown model " + name)


def input_shape(name):
    return {"mlp": (1000,), "simple_cnn": (3, 32, 32), "deep_cnn": (3, 64, 64)}[name]


def fan_in_of(module):
    if isinstance(module, nn.Linear):
        return module.in_features
    if isinstance(module, nn.Conv2d):
        kh, kw = module.kernel_size
        return (module.in_channels // module.groups) * kh * kw
    raise TypeError(type(module).__name__)


def hr_init(model, seed=SEED):
    """Overwrite every parameter (state_dict order, index k) with
    bound*(2u-1), bound = 1/sqrt(fan_in of its layer), u from stream 1000+k."""
    mods = dict(model.named_modules())
    with torch.no_grad():
        for k, (pname, p) in enumerate(model.state_dict().items()):
            layer = mods[pname.rsplit(".", 1)[0]]
            v = hr_rng.param_init(seed, STREAM_PARAM0 + k, p.numel(), fan_in_of(layer))
            p.copy_(torch.from_numpy(v).reshape(p.shape))


def hr_batch(name, batch, seed=SEED):
    shp = (batch,) + input_shape(name)
    n = int(np.prod(shp))
    x = torch.from_numpy(hr_rng.symmetric(seed, STREAM_X, n)).reshape(shp)
    y = torch.from_numpy(hr_rng.labels(seed, STREAM_LABELS, batch, CLASSES)).long()
    return x, y


# --------------------------------------------------------------------------
# safetensors, written by hand (Debian has no python3-safetensors)

_DT = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, np.ndarray float32/int32), in file order."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        b = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _DT[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": "<f4", "I32": "<i4"}[d["dtype"]]
        a, b = d["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dt).reshape(d["shape"])
    return header.get("__metadata__", {}), out


# --------------------------------------------------------------------------
# one run of the reference computation, in a given dtype

def run_reference(name, batch, dtype):
    """Returns an ordered dict: record name -> numpy array (full tensors; the
    sampling happens later), computed entirely in `dtype`."""
    torch.manual_seed(0)  # irrelevant (no randomness is used) but harmless
    rec = {}
    model = build_model(name)
    hr_init(model)
    model = model.to(dtype)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    x, y = hr_batch(name, batch)
    x = x.to(dtype)
    lossf = nn.CrossEntropyLoss()

    rec["x_head"] = x.reshape(-1)[:X_HEAD]
    rec["labels"] = y.to(torch.int32)
    for k, v in init.items():
        rec["init.%s_head" % k] = v.reshape(-1)[:INIT_HEAD]

    model.zero_grad()
    logits = model(x)
    loss = lossf(logits, y)
    loss.backward()
    rec["loss"] = loss.detach().reshape(1)
    rec["logits"] = logits.detach()
    for k, p in model.named_parameters():
        rec["grad." + k] = p.grad.detach().clone()

    def train(prefix, make_opt, clip=None):
        with torch.no_grad():
            for k, p in model.named_parameters():
                p.copy_(init[k])
        opt = make_opt(model.parameters())
        losses = []
        for _ in range(STEPS):
            opt.zero_grad()
            l = lossf(model(x), y)
            l.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            losses.append(l.detach().reshape(1))
        for k, p in model.named_parameters():
            rec["%s.%s" % (prefix, k)] = p.detach().clone()
        rec[prefix + ".loss"] = torch.cat(losses)

    adam = lambda ps: torch.optim.Adam(ps, lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    train("adam5", adam)
    if name == "simple_cnn":
        train("sgd5", lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, nesterov=True,
                                                 weight_decay=1e-4))
        train("adamw5", lambda ps: torch.optim.AdamW(ps, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                                     weight_decay=0.01))
        train("clip5", adam, clip=0.5)
    rec["_init"] = init  # for the error report (not written)
    return rec


def to_records(rec):
    """Apply the storage rule: list of (name, np array float32/int32)."""
    out = []
    for k, v in rec.items():
        if k.startswith("_"):
            continue
        a = v.numpy()
        a = a.astype(np.int32) if a.dtype.kind in "iu" else a.astype(np.float32)
        sampled = (k.startswith("grad.") or k.split(".")[0] in ("adam5", "sgd5", "adamw5", "clip5")) \
            and not k.endswith(".loss") and a.size > FULL_MAX
        if not sampled:
            out.append((k, a))
            continue
        flat64 = v.reshape(-1).to(torch.float64).numpy()
        stride = a.size // N_SAMPLE
        idx = (np.arange(N_SAMPLE, dtype=np.int64) * stride).astype(np.int32)
        out.append((k + ".idx", idx))
        out.append((k + ".val", a.reshape(-1)[idx]))
        out.append((k + ".sum", np.array([flat64.sum()], dtype=np.float32)))
        out.append((k + ".sumsq", np.array([(flat64 * flat64).sum()], dtype=np.float32)))
    return out


# --------------------------------------------------------------------------
# the float32-vs-float64 error report

OPT_PREFIXES = ("adam5", "sgd5", "adamw5", "clip5")


def err_report(r32, r64):
    """The float32 result against the float64 one, in the metrics that
    docs/golden.md asks the C tests to use. Returns rows
    (name, numel, metric name, value) ."""
    rows = []
    init = r32["_init"]
    for k, v in r32.items():
        if k.startswith("_") or k in ("labels", "x_head") or k.startswith("init."):
            continue
        a = v.to(torch.float64)
        b = r64[k]
        pfx = k.split(".")[0]
        if k == "loss" or k.endswith(".loss"):
            rows.append((k, v.numel(), "rel", ((a - b).abs() / b.abs()).max().item()))
            continue
        scale = b.abs().max().item() or 1.0
        if pfx in OPT_PREFIXES:
            p0 = init[k[len(pfx) + 1:]].to(torch.float64)
            da, db = a - p0, b - p0
            rows.append((k, v.numel(), "upd_l2", (da - db).norm().item() / (db.norm().item() or 1.0)))
            rows.append((k, v.numel(), "abs", (a - b).abs().max().item()))
            rows.append((k, v.numel(), "upd_nmax", (da - db).abs().max().item() / (db.abs().max().item() or 1.0)))
        else:
            rows.append((k, v.numel(), "nmax", (a - b).abs().max().item() / scale))
        if v.numel() > FULL_MAX:
            n = v.numel()
            sa, sb = a.sum().item(), b.sum().item()
            qa, qb = (a * a).sum().item(), (b * b).sum().item()
            rows.append((k, n, "sum/sqrt(n*sumsq)", abs(sa - sb) / math.sqrt(n * qb)))
            rows.append((k, n, "sumsq_rel", abs(qa - qb) / qb))
    return rows


def compare_dirs(new_dir, ref_dir, names):
    """Print, per tensor, how the files in new_dir differ from those in ref_dir
    (e.g. the same generator under another torch version): 'exact' or
    max|a-b| / max|b|."""
    worst = 0.0
    for name in names:
        _, a = read_safetensors(os.path.join(new_dir, name + ".safetensors"))
        _, b = read_safetensors(os.path.join(ref_dir, name + ".safetensors"))
        print("== compare %s: %s vs %s" % (name, new_dir, ref_dir))
        for k in b:
            if k not in a or a[k].shape != b[k].shape:
                print("  %-28s MISSING or shape differs" % k)
                worst = float("inf")
                continue
            if np.array_equal(a[k], b[k]):
                print("  %-28s exact" % k)
                continue
            x, y = a[k].astype(np.float64), b[k].astype(np.float64)
            e = np.abs(x - y).max() / (np.abs(y).max() or 1.0)
            worst = max(worst, e) if not (k.startswith(OPT_PREFIXES) and not k.endswith("loss")) else worst
            print("  %-28s nmax %.2e" % (k, e))
    print("worst nmax outside the optimizer parameters: %.2e" % worst)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=list(BATCH) + ["all"], default="all")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "tests", "golden"))
    ap.add_argument("--no-f64", action="store_true", help="skip the float64 error report")
    ap.add_argument("--compare", metavar="DIR",
                    help="after writing, compare the new files with those in DIR (e.g. tests/golden)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    names = list(BATCH) if args.model == "all" else [args.model]
    for name in names:
        B = BATCH[name]
        r32 = run_reference(name, B, torch.float32)
        recs = to_records(r32)
        path = os.path.join(args.out, name + ".safetensors")
        meta = {"model": name, "batch": B, "seed": SEED, "torch": torch.__version__,
                "generator": "scripts/make_golden.py", "contract": "docs/golden.md"}
        write_safetensors(path, recs, meta)
        _, back = read_safetensors(path)
        for k, a in recs:
            assert np.array_equal(back[k], a), k
        print("== %s  batch %d  -> %s (%d bytes, %d tensors)"
              % (name, B, os.path.relpath(path), os.path.getsize(path), len(recs)))
        for k, a in recs:
            if a.dtype == np.int32:
                print("  %-28s I32 %-14s min %d max %d" % (k, list(a.shape), a.min(), a.max()))
            else:
                print("  %-28s F32 %-14s min % .6g max % .6g  mean|.| %.4g"
                      % (k, list(a.shape), a.min(), a.max(), np.abs(a).mean()))
        if not args.no_f64:
            r64 = run_reference(name, B, torch.float64)
            print("  -- float32 vs float64, metrics of docs/golden.md (upd: p - p0)")
            for k, n, metric, e in err_report(r32, r64):
                print("  %-28s %9d %-18s %10.2e" % (k, n, metric, e))
        sys.stdout.flush()
    if args.compare:
        compare_dirs(args.out, args.compare, names)


if __name__ == "__main__":
    main()
