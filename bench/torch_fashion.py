#!/usr/bin/python3
"""torch_fashion.py — the PyTorch baseline for headroom's main job: a small CNN
trained on Fashion-MNIST.

    /usr/bin/python3 bench/torch_fashion.py --epochs 10 --batch 64 --threads 2

Reads the IDX .gz files with gzip + numpy (no torchvision), normalises with
mean 0.2860 and std 0.3530, and trains

    Conv2d(1,32,3,padding=1) BatchNorm2d(32) ReLU MaxPool2d(2)
    Conv2d(32,64,3,padding=1) BatchNorm2d(64) ReLU MaxPool2d(2)
    Flatten Dropout(0.25) Linear(3136,256) ReLU Dropout(0.5) Linear(256,10)  (examples/fashion.model)

with Adam (lr 1e-3) and CrossEntropyLoss, reshuffling the training set every
epoch (the last, partial batch is kept). After every epoch the model is
evaluated on the 10000 test images (eval mode). Progress goes to stderr; ONE
JSON line goes to stdout at the end, with per-epoch wall time (training only),
samples/s, mean train loss and test accuracy.
"""

import argparse
import gzip
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn

MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError("%s: not an unsigned-byte IDX file" % path)
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise ValueError("%s: %d bytes of data for shape %s" % (path, arr.size, dims))
    return arr.reshape(dims)


def load(data_dir, split):
    pfx = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, pfx + "-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, pfx + "-labels-idx1-ubyte.gz"))
    x = (x.astype(np.float32) / 255.0 - MEAN) / STD
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y.astype(np.int64))


def build_model():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25), nn.Linear(3136, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, 10))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--amp", choices=["bf16", "fp16"], help="torch.autocast in this type (fp16: with GradScaler)")
    ap.add_argument("--benchmark", action="store_true", help="cudnn.benchmark = True")
    args = ap.parse_args()
    if args.benchmark:
        torch.backends.cudnn.benchmark = True
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"

    t0 = time.perf_counter()
    xtr, ytr = load(args.data, "train")
    xte, yte = load(args.data, "test")
    xtr, ytr, xte, yte = (t.to(dev) for t in (xtr, ytr, xte, yte))
    load_s = time.perf_counter() - t0
    n = xtr.shape[0]
    log("loaded %d train / %d test images in %.2f s" % (n, xte.shape[0], load_s))

    model = build_model().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    lossf = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed)
    scaler = torch.amp.GradScaler(dev.type) if args.amp == "fp16" else None

    def evaluate():
        model.eval()
        correct = 0
        with torch.no_grad(), torch.autocast(dev.type, dtype=amp or torch.bfloat16, enabled=amp is not None):
            for i in range(0, xte.shape[0], 1000):
                correct += (model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
        return correct / xte.shape[0]

    epochs = []
    for ep in range(args.epochs):
        model.train()
        perm = torch.randperm(n, generator=gen).to(dev)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        tot, nb = torch.zeros((), device=dev), 0
        for bi, i in enumerate(range(0, n, args.batch)):
            idx = perm[i:i + args.batch]
            opt.zero_grad()
            if amp is None:
                loss = lossf(model(xtr[idx]), ytr[idx])
                loss.backward()
                opt.step()
            else:
                with torch.autocast(dev.type, dtype=amp):
                    loss = lossf(model(xtr[idx]), ytr[idx])
                if scaler:
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    scaler.update()
                else:
                    loss.backward()
                    opt.step()
            tot += loss.detach().float()
            nb += 1
            if bi % 200 == 0:
                log("epoch %d  batch %d/%d  loss %.4f  %.1f s"
                    % (ep + 1, bi, (n + args.batch - 1) // args.batch, loss.item(), time.perf_counter() - t0))
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        acc = evaluate()
        e = {"epoch": ep + 1, "wall_s": round(wall, 3), "samples_per_s": round(n / wall, 1),
             "train_loss": round(tot.item() / nb, 5), "test_acc": round(acc, 4)}
        epochs.append(e)
        log(json.dumps(e))

    out = {
        "bench": "torch_fashion",
        "framework": "pytorch",
        "torch": torch.__version__,
        "device": args.device if not cuda else torch.cuda.get_device_name(),
        "threads": args.threads,
        "batch": args.batch,
        "epochs_run": args.epochs,
        "lr": args.lr,
        "seed": args.seed,
        "amp": args.amp or "fp32",
        "cudnn_benchmark": bool(args.benchmark),
        "params": sum(p.numel() for p in model.parameters()),
        "load_s": round(load_s, 3),
        "train_s": round(sum(e["wall_s"] for e in epochs), 3),
        "final_test_acc": epochs[-1]["test_acc"] if epochs else None,
        "best_test_acc": max(e["test_acc"] for e in epochs) if epochs else None,
        "epochs": epochs,
    }
    if cuda:
        out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
