#!/usr/bin/env python3
"""torch_gpt.py — the character GPT of examples/char_gpt.model in PyTorch, trained
as `headroom train` trains it, for the side-by-side numbers of issue 15.

    python3 bench/torch_gpt.py --text .data/fortunes.txt --steps 500 [--compile]

The model is nanoGPT's (same module names, so a headroom checkpoint loads with
load_state_dict(strict=True)): token and position embeddings, dropout, pre-norm
blocks of causal self-attention (scaled_dot_product_attention, is_causal) and a
GELU MLP, a final LayerNorm, lm_head tied to the token embedding, GPT-2's
initial values. The data is headroom's: the text's bytes, the last tenth (at
least a window) for validation, non-overlapping windows of `block` bytes whose
labels are the next bytes, each epoch in a shuffled order. AdamW with
PyTorch's defaults but the learning rate, fp32 (TF32 off, as headroom), one JSON
line out: the validation loss over every validation window after the steps,
wall time, median step time, peak memory.

--check CKPT: instead of training, load a headroom checkpoint with
load_state_dict(strict=True) and print the validation loss of those weights
(the same number `headroom eval` prints).
"""

import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def layer_norm(c, bias):
    try:
        return nn.LayerNorm(c, bias=bias)
    except TypeError:  # PyTorch before 2.1: no bias argument
        m = nn.LayerNorm(c)
        if not bias:
            m.bias = None
        return m


def sdpa(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]  # PyTorch before 2.0
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return att.softmax(-1) @ v


class Attention(nn.Module):
    def __init__(self, c, heads, bias):
        super().__init__()
        self.c_attn = nn.Linear(c, 3 * c, bias=bias)
        self.c_proj = nn.Linear(c, c, bias=bias)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = sdpa(q, k, v)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, c, bias):
        super().__init__()
        self.c_fc = nn.Linear(c, 4 * c, bias=bias)
        self.c_proj = nn.Linear(4 * c, c, bias=bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c, heads, bias, p):
        super().__init__()
        self.ln_1 = layer_norm(c, bias)
        self.attn = Attention(c, heads, bias)
        self.ln_2 = layer_norm(c, bias)
        self.mlp = MLP(c, bias)
        self.drop1, self.drop2 = nn.Dropout(p), nn.Dropout(p)

    def forward(self, x):
        x = x + self.drop1(self.attn(self.ln_1(x)))
        return x + self.drop2(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    def __init__(self, vocab=256, block=256, layers=6, heads=6, c=384, bias=False, p=0.2):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, c), wpe=nn.Embedding(block, c), drop=nn.Dropout(p),
            h=nn.ModuleList([Block(c, heads, bias, p) for _ in range(layers)]),
            ln_f=layer_norm(c, bias)))
        self.lm_head = nn.Linear(c, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as nanoGPT
        for name, prm in self.named_parameters():  # init gpt2
            if name.endswith("c_proj.weight"):
                nn.init.normal_(prm, 0.0, 0.02 / math.sqrt(2 * layers))
            elif prm.dim() == 2:
                nn.init.normal_(prm, 0.0, 0.02)
            elif name.endswith("bias") and "ln" not in name:
                nn.init.zeros_(prm)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T, device=idx.device)))
        for b in self.transformer.h:
            x = b(x)
        return self.lm_head(self.transformer.ln_f(x))


def windows(path, block):
    data = open(path, "rb").read()
    n = len(data)
    nval = max(block + 1, int(n * 0.1))  # hr_text_split
    tr, va = data[: n - nval], data[n - nval:]

    def cut(b):
        t = torch.frombuffer(bytearray(b), dtype=torch.uint8).long()
        k = (len(b) - 1) // block
        x = t[: k * block].view(k, block)
        y = t[1: k * block + 1].view(k, block)
        return x, y
    return cut(tr), cut(va)


def val_loss(model, va, dev, batch):
    model.eval()
    tot, cnt = 0.0, 0
    with torch.no_grad():
        for i in range(0, va[0].shape[0], batch):
            x, y = va[0][i:i + batch].to(dev), va[1][i:i + batch].to(dev)
            lg = model(x)
            tot += F.cross_entropy(lg.view(-1, lg.shape[-1]), y.reshape(-1), reduction="sum").item()
            cnt += y.numel()
    model.train()
    return tot / cnt


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__" or k.startswith("optim."):
            continue
        a, b = v["data_offsets"]
        dt = {"F32": torch.float32, "I64": torch.int64}[v["dtype"]]
        out[k] = torch.frombuffer(bytearray(blob[a:b]), dtype=dt).view(v["shape"]).clone()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", required=True)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--check", help="a headroom checkpoint: its validation loss, loaded with strict=True")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    t0 = time.perf_counter()
    tr, va = windows(a.text, a.block)
    model = GPT(block=a.block, layers=a.layers, heads=a.heads, c=a.width, p=a.dropout).to(dev)
    if a.check:
        model.load_state_dict(read_safetensors(a.check), strict=True)
        print(json.dumps({"impl": "pytorch", "check": a.check, "val_loss": round(val_loss(model, va, dev, a.batch), 4)}))
        return
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    step_fn = model
    if a.compile:
        step_fn = torch.compile(model)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times, losses, step, epoch = [], [], 0, 0
    while step < a.steps:
        g = torch.Generator().manual_seed(a.seed * 1000 + epoch)
        order = torch.randperm(tr[0].shape[0], generator=g)
        for i in range(0, len(order) - a.batch + 1, a.batch):  # whole batches (the last short one dropped)
            if step == a.steps:
                break
            idx = order[i:i + a.batch]
            x, y = tr[0][idx].to(dev, non_blocking=True), tr[1][idx].to(dev, non_blocking=True)
            if cuda:
                torch.cuda.synchronize()
            s0 = time.perf_counter()
            lg = step_fn(x)
            loss = F.cross_entropy(lg.view(-1, lg.shape[-1]), y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())  # reads back, as headroom's step does
            times.append((time.perf_counter() - s0) * 1e3)
            step += 1
        epoch += 1
    vl = val_loss(model, va, dev, a.batch)
    wall = time.perf_counter() - t0
    ts = sorted(times[5:] or times)
    print(json.dumps({
        "impl": "pytorch" + (" compile" if a.compile else " eager"), "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if cuda else "cpu", "steps": a.steps, "batch": a.batch,
        "block": a.block, "val_loss": round(vl, 4), "last_train_loss": round(losses[-1], 4),
        "wall_s": round(wall, 2), "median_step_ms": round(ts[len(ts) // 2], 3),
        "max_allocated": torch.cuda.max_memory_allocated() if cuda else None,
        "max_reserved": torch.cuda.max_memory_reserved() if cuda else None}))


if __name__ == "__main__":
    sys.exit(main())
