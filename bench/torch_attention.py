#!/usr/bin/env python3
"""torch_attention.py — PyTorch's F.scaled_dot_product_attention(is_causal=True)
forward and backward times at the shapes tests/gpu/test_cuda_attention.c times
headroom's kernels (the character GPT's and GPT-2's), fp32 (TF32 off) and bf16:
CUDA events around each, medians of 15 after 3 warm-ups, one line each.

    python3 bench/torch_attention.py            # PyTorch's own choice
    python3 bench/torch_attention.py backends   # bf16: flash, cuDNN, efficient each
"""
import sys
import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def time_one(name, N, T, C, H, dt, label=""):
    hs = C // H
    q, k, v = (torch.randn(N, H, T, hs, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
    dy = torch.randn(N, H, T, hs, device="cuda", dtype=dt)
    tf, tb = [], []
    for i in range(18):
        e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        e[0].record()
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        e[1].record()
        y.backward(dy)
        e[2].record()
        torch.cuda.synchronize()
        if i >= 3:
            tf.append(e[0].elapsed_time(e[1]))
            tb.append(e[1].elapsed_time(e[2]))
    print("  torch %-10s %s%s N%d T%d C%d H%d: forward %.3f ms, backward %.3f ms (medians of 15)"
          % (name, "fp32" if dt == torch.float32 else "bf16", label, N, T, C, H, med(tf), med(tb)))


if len(sys.argv) > 1 and sys.argv[1] == "backends":
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for be, label in ((SDPBackend.FLASH_ATTENTION, " flash"), (SDPBackend.CUDNN_ATTENTION, " cudnn"),
                      (SDPBackend.EFFICIENT_ATTENTION, " efficient")):
        with sdpa_kernel(be):
            for shape in (("char_gpt", 64, 256, 384, 6), ("gpt2", 8, 1024, 768, 12), ("gpt2", 16, 1024, 768, 12)):
                time_one(*shape, torch.bfloat16, label)
else:
    for dt in (torch.float32, torch.bfloat16):
        time_one("char_gpt", 64, 256, 384, 6, dt)
        time_one("gpt2", 8, 1024, 768, 12, dt)
