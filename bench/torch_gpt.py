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

--random-tokens: no text; every step trains on one fixed batch of random ids
in [0, vocab) (labels too), as bench/bench_step does, and the JSON line is a
step-time measurement (no validation): median/mean/min/max step ms after
--warmup steps, tokens/s (batch x block / median), max allocated and reserved,
and NVML's peak of this process (pynvml, else nvidia-smi sampled by a thread;
nvml_peak null with nvml_why when neither can tell). A step is the batch's
copy from (pageable) host memory, forward and loss, zero_grad, backward, the
optimizer's step and the loss read back (which synchronises), timed by the
host clock after a synchronize: what headroom's step is and how it is timed.
GPT-2 124M, as examples/gpt2.model:

    python3 bench/torch_gpt.py --random-tokens --vocab 50257 --block 1024 --layers 12 \
        --heads 12 --width 768 --bias --dropout 0 --gelu tanh --batch 8 --steps 20 --warmup 5 \
        --precision bf16 --fused [--compile]

--compile (with --random-tokens): torch.compile's default mode over the
forward pass and the loss together, as nanoGPT compiles its model (whose
forward computes the loss); the warmup steps include the compilation.
--precision bf16: torch.autocast(device_type, torch.bfloat16) around the
forward pass and the loss; parameters, gradients and AdamW's state stay fp32
(what headroom's --precision bf16 does). --fused: AdamW(fused=True) (else
PyTorch's default, foreach on CUDA). --largest (with --random-tokens): the
largest batch that trains one step without running out of memory, by doubling
from 1 and then bisecting; the model and the optimizer live through the
probes (the optimizer's state counts once made), and after each probe the
gradients are dropped and the cache emptied. One JSON line with every probe.
"""


import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import threading
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


def dropout(p):
    return nn.Dropout(p) if p > 0 else nn.Identity()  # no parameters either way: the state dict is the same


def sdpa(q, k, v, p=0.0):
    """Causal attention, dropping probabilities with probability p (nanoGPT's attn dropout)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
    T = q.shape[-2]  # PyTorch before 2.0
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return F.dropout(att.softmax(-1), p) @ v


class Attention(nn.Module):
    def __init__(self, c, heads, bias, p=0.0):
        super().__init__()
        self.c_attn = nn.Linear(c, 3 * c, bias=bias)
        self.c_proj = nn.Linear(c, c, bias=bias)
        self.heads = heads
        self.p = p  # attention dropout, in training only

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = sdpa(q, k, v, self.p if self.training else 0.0)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, c, bias, gelu="none"):
        super().__init__()
        self.c_fc = nn.Linear(c, 4 * c, bias=bias)
        self.c_proj = nn.Linear(4 * c, c, bias=bias)
        self.gelu = gelu

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate=self.gelu))


class Block(nn.Module):
    def __init__(self, c, heads, bias, p, gelu="none"):
        super().__init__()
        self.ln_1 = layer_norm(c, bias)
        self.attn = Attention(c, heads, bias, p)
        self.ln_2 = layer_norm(c, bias)
        self.mlp = MLP(c, bias, gelu)
        self.drop1, self.drop2 = dropout(p), dropout(p)

    def forward(self, x):
        x = x + self.drop1(self.attn(self.ln_1(x)))
        return x + self.drop2(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    def __init__(self, vocab=256, block=256, layers=6, heads=6, c=384, bias=False, p=0.2, gelu="none"):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, c), wpe=nn.Embedding(block, c), drop=dropout(p),
            h=nn.ModuleList([Block(c, heads, bias, p, gelu) for _ in range(layers)]),
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


class NvmlPeak:
    """This process's device memory as the driver reports it, read by a thread
    every `period` s: pynvml when it imports, else nvidia-smi. The process is
    found by its PID or, when the driver lists host PIDs (a container), by the
    one listed PID that does not exist here (as headroom's hr_nvml_self_used).
    peak stays None when nothing could tell; why says why."""

    def __init__(self, dev_index=0, period=0.02):
        self.peak, self.device_peak, self.how, self.why, self.samples = None, None, None, None, 0
        self.period, self.stop_ev, self.thread = period, threading.Event(), None
        self.read, self.source = None, None
        pr = torch.cuda.get_device_properties(dev_index)
        bus = None  # NVML's spelling of the bus id: the GPU whatever CUDA_VISIBLE_DEVICES renumbers
        if all(hasattr(pr, k) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
            bus = "%08x:%02x:%02x.0" % (pr.pci_domain_id, pr.pci_bus_id, pr.pci_device_id)
        try:
            import pynvml
            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByPciBusId(bus) if bus else pynvml.nvmlDeviceGetHandleByIndex(dev_index)

            def read():
                procs = [(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
                return procs, pynvml.nvmlDeviceGetMemoryInfo(h).used
            self.read, self.source = read, "pynvml"
        except Exception as e:  # no pynvml, or it cannot reach the driver
            self.why = "pynvml: %s" % e
        if self.read is None and shutil.which("nvidia-smi"):
            vis = bus or os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or str(dev_index)

            def read():
                out = subprocess.run(["nvidia-smi", "-i", vis, "--query-compute-apps=pid,used_memory",
                                      "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10).stdout
                procs = []
                for line in out.splitlines():
                    f = [x.strip() for x in line.split(",")]
                    if len(f) == 2 and f[0].isdigit():
                        procs.append((int(f[0]), int(f[1]) << 20 if f[1].isdigit() else None))
                used = subprocess.run(["nvidia-smi", "-i", vis, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                      capture_output=True, text=True, timeout=10).stdout.strip()
                return procs, int(used) << 20 if used.isdigit() else None
            self.read, self.source, self.period = read, "nvidia-smi", max(period, 0.1)
        elif self.read is None:
            self.why = (self.why + "; " if self.why else "") + "no nvidia-smi"

    def sample(self):
        try:
            procs, used = self.read()
        except Exception as e:
            self.why = "%s: %s" % (self.source, e)
            return
        self.samples += 1
        if used is not None:
            self.device_peak = max(self.device_peak or 0, used)
        mine = [b for pid, b in procs if pid == os.getpid()]
        how = "pid"
        if not mine:  # host PIDs seen from a container: the one PID that is not ours to see
            alien = [b for pid, b in procs if not os.path.exists("/proc/%d" % pid)]
            mine, how = (alien, "guess") if len(alien) == 1 else ([], None)
        if mine and mine[0] is not None:
            self.peak, self.how = max(self.peak or 0, mine[0]), how

    def _run(self):
        while not self.stop_ev.wait(self.period):
            self.sample()

    def start(self):
        if self.read:
            self.sample()
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return self

    def stop(self):
        if self.thread:
            self.stop_ev.set()
            self.thread.join()
            self.sample()
        if self.read and self.peak is None and not self.why:
            self.why = "%s does not list this process" % self.source
        return {"nvml_peak": self.peak, "nvml_device_peak": self.device_peak, "nvml_how": self.how,
                "nvml_source": self.source if self.read else None, "nvml_samples": self.samples,
                **({"nvml_why": self.why} if self.peak is None else {})}


def make_optimizer(model, a, dev):
    kw = {"lr": a.lr}
    if a.fused:
        kw["fused"] = True
    return torch.optim.AdamW(model.parameters(), **kw)


def forward_loss(model, compile_):
    """The forward pass and the loss as one function: torch.compile gets both
    (as nanoGPT's model, whose forward computes the loss), so it may fuse the
    logits' cast with the cross entropy."""
    def f(x, y):
        lg = model(x)
        return F.cross_entropy(lg.view(-1, lg.shape[-1]), y.view(-1))
    return torch.compile(f) if compile_ else f


def train_step(model, loss_fn, opt, xh, yh, dev, amp):
    """One step from a host batch: upload, forward and loss (under autocast for
    bf16), zero_grad, backward, the update, the loss read back."""
    x, y = xh.to(dev, non_blocking=False), yh.to(dev, non_blocking=False)
    with amp():
        loss = loss_fn(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def random_batch(a, batch, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, a.vocab, (batch, a.block), generator=g)
    y = torch.randint(0, a.vocab, (batch, a.block), generator=g)
    return x, y


def amp_of(a, dev):
    if a.precision == "bf16":
        return lambda: torch.autocast(device_type=dev.type, dtype=torch.bfloat16)
    import contextlib
    return contextlib.nullcontext


def describe(a, model, cuda):
    return {"impl": "pytorch" + (" compile" if a.compile else " eager"), "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if cuda else "cpu", "precision": a.precision,
            "optim": "AdamW" + (" fused" if a.fused else ""), "lr": a.lr,
            "params": sum(p.numel() for p in model.parameters()), "vocab": a.vocab, "block": a.block,
            "layers": a.layers, "heads": a.heads, "width": a.width, "bias": a.bias, "dropout": a.dropout}


def random_timing(a, dev):
    """--random-tokens: median step time of one fixed random batch."""
    cuda = dev.type == "cuda"
    t0 = time.perf_counter()
    model = GPT(vocab=a.vocab, block=a.block, layers=a.layers, heads=a.heads, c=a.width, bias=a.bias,
                p=a.dropout, gelu=a.gelu).to(dev)
    opt = make_optimizer(model, a, dev)
    step_fn = forward_loss(model, a.compile)
    amp = amp_of(a, dev)
    xh, yh = random_batch(a, a.batch, a.seed)
    nv = NvmlPeak(dev.index or 0).start() if cuda else None
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for i in range(a.warmup + a.steps):
        if cuda:
            torch.cuda.synchronize()
        s0 = time.perf_counter()
        losses.append(train_step(model, step_fn, opt, xh, yh, dev, amp))
        if i >= a.warmup:
            times.append((time.perf_counter() - s0) * 1e3)
    wall = time.perf_counter() - t0
    ts = sorted(times)
    n = len(ts)
    med = ts[n // 2] if n % 2 else 0.5 * (ts[n // 2 - 1] + ts[n // 2])
    out = describe(a, model, cuda)
    out.update({"mode": "step", "batch": a.batch, "steps": a.steps, "warmup": a.warmup,
                "median_step_ms": round(med, 3), "mean_step_ms": round(sum(ts) / n, 3),
                "min_step_ms": round(ts[0], 3), "max_step_ms": round(ts[-1], 3),
                "tokens_per_s": round(a.batch * a.block / (med / 1e3), 1),
                "first_loss": round(losses[0], 4), "last_train_loss": round(losses[-1], 4), "wall_s": round(wall, 2),
                "max_allocated": torch.cuda.max_memory_allocated() if cuda else None,
                "max_reserved": torch.cuda.max_memory_reserved() if cuda else None})
    if nv:
        out.update(nv.stop())
    print(json.dumps(out))


def is_oom(e):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(e, oom)) or "out of memory" in str(e)


def largest(a, dev):
    """--largest: the largest batch that trains one step, by doubling then bisection."""
    cuda = dev.type == "cuda"
    t0 = time.perf_counter()
    model = GPT(vocab=a.vocab, block=a.block, layers=a.layers, heads=a.heads, c=a.width, bias=a.bias,
                p=a.dropout, gelu=a.gelu).to(dev)
    opt = make_optimizer(model, a, dev)
    step_fn = forward_loss(model, a.compile)
    amp = amp_of(a, dev)
    nv = NvmlPeak(dev.index or 0).start() if cuda else None
    probes = []

    def probe(b):
        s0, ok, why, loss, reserved = time.perf_counter(), False, "", None, None
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        try:
            xh, yh = random_batch(a, b, a.seed)
            loss = train_step(model, step_fn, opt, xh, yh, dev, amp)
            ok = math.isfinite(loss)
            why = "" if ok else "loss %r" % loss
        except (RuntimeError, MemoryError) as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
            if not is_oom(e):
                raise
            why = str(e).split("\n")[0][:300]
        # outside the except block: the exception (and its frames' tensors) is gone
        opt.zero_grad(set_to_none=True)
        if cuda:
            reserved = torch.cuda.max_memory_reserved()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        probes.append({"batch": b, "ok": ok, "secs": round(time.perf_counter() - s0, 2),
                       "loss": round(loss, 4) if loss is not None and math.isfinite(loss) else None,
                       "max_reserved": reserved, **({"why": why} if why else {})})
        print("torch_gpt --largest: batch %d: %s %s" % (b, "ok" if ok else "FAILED", why), file=sys.stderr)
        return ok

    lo, hi, b = 0, None, 1
    while b <= a.largest_cap:  # doubling
        if not probe(b):
            hi = b
            break
        lo, b = b, 2 * b
    if hi is None:
        hi = a.largest_cap + 1
    while hi - lo > 1:  # bisection: lo trains, hi does not
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    out = describe(a, model, cuda)
    out.update({"mode": "largest", "largest": lo, "cap": a.largest_cap, "probes": probes,
                "search_s": round(time.perf_counter() - t0, 2),
                "device_total": torch.cuda.get_device_properties(dev).total_memory if cuda else None})
    if nv:
        out.update(nv.stop())
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", help="the training text (required unless --random-tokens)")
    ap.add_argument("--random-tokens", action="store_true", help="time steps on random ids, no text")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--bias", action="store_true", help="biases in Linear and LayerNorm (GPT-2's; char_gpt has none)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the step times")
    ap.add_argument("--largest", action="store_true", help="with --random-tokens: the largest batch that trains")
    ap.add_argument("--largest-cap", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--gelu", choices=["none", "tanh"], default="none",
                    help="GELU's approximate= (GPT-2's is tanh: examples/gpt2.model; char_gpt's none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--check", help="a headroom checkpoint: its validation loss, loaded with strict=True")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    if a.random_tokens:
        return largest(a, dev) if a.largest else random_timing(a, dev)
    if not a.text:
        ap.error("--text is required without --random-tokens")
    t0 = time.perf_counter()
    tr, va = windows(a.text, a.block)
    model = GPT(vocab=a.vocab, block=a.block, layers=a.layers, heads=a.heads, c=a.width, bias=a.bias,
                p=a.dropout, gelu=a.gelu).to(dev)
    if a.check:
        model.load_state_dict(read_safetensors(a.check), strict=True)
        print(json.dumps({"impl": "pytorch", "check": a.check, "val_loss": round(val_loss(model, va, dev, a.batch), 4)}))
        return
    opt = make_optimizer(model, a, dev)
    amp = amp_of(a, dev)
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
            with amp():
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
    ts = sorted(times[a.warmup:] or times)
    print(json.dumps({
        "impl": "pytorch" + (" compile" if a.compile else " eager"), "torch": torch.__version__, "precision": a.precision,
        "device": torch.cuda.get_device_name() if cuda else "cpu", "steps": a.steps, "batch": a.batch,
        "block": a.block, "val_loss": round(vl, 4), "last_train_loss": round(losses[-1], 4),
        "wall_s": round(wall, 2), "median_step_ms": round(ts[len(ts) // 2], 3),
        "max_allocated": torch.cuda.max_memory_allocated() if cuda else None,
        "max_reserved": torch.cuda.max_memory_reserved() if cuda else None}))


if __name__ == "__main__":
    sys.exit(main())
