#!/usr/bin/python3
"""torch_models.py — the standard CNN suite in PyTorch, with the parameter
names headroom's model files give (so that a headroom checkpoint loads with
load_state_dict(strict=True)), the model files themselves, and the check that
tests/test_suite_models.c runs.

The architectures, for 32x32 colour images and 10 classes:
  vgg16_bn      VGG-16 with batch norm, CIFAR variant (13 conv3x3+BN+ReLU, 5
                max pools, classifier Linear(512, 10)), as kuangliu/pytorch-cifar
  resnet18      ResNet-18 for CIFAR: 3x3 stem, no max pool, 4 stages of 2
                basic blocks (64/128/256/512), 1x1 conv + BN projections where
                the shape changes, global average pool, Linear(512, 10)
  resnet20      ResNet-20 (He et al. 2015, section 4.2): 3 stages of 3 basic
                blocks (16/32/64 channels); projection shortcuts (option B,
                1x1 conv + BN) where the shape changes, since the model
                language has Add but no zero padding of channels
  mobilenet_v1  MobileNetV1 for 32x32: a 3x3 stem (stride 1, 32 channels),
                13 blocks of depthwise 3x3 (groups = channels) + BN + ReLU and
                pointwise 1x1 + BN + ReLU, global average pool, Linear(1024, 10)
  encoder_gpt   not a CNN: a small GPT of two nn.TransformerEncoderLayer
                lines (headroom's one-line block; a causal src_mask), token
                ids in, logits at every position out

VGG-16 and MobileNetV1 are nn.Sequential (parameters "0.weight", ...: every
line of the model file is one entry); the ResNets are modules whose layers
carry the model files' names (l2_0_conv1.weight: stage 2, block 0).

    /usr/bin/python3 bench/torch_models.py write          # bench/models/*.model, examples/resnet20.model
    /usr/bin/python3 bench/torch_models.py check DIR      # DIR/NAME.ckpt.safetensors + DIR/NAME.io.safetensors
    /usr/bin/python3 bench/torch_models.py params         # parameter counts

check: for each NAME with files in DIR, loads headroom's checkpoint (optimizer
state aside) into the PyTorch model with load_state_dict(strict=True), runs
the eval-mode forward on the stored input "x" and compares with headroom's
logits "logits": max|a - b| / max|b| <= 1e-4. Also checks the parameter count
against the published one. Exit status 0 only if every model passed.
"""

import copy
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CLASSES = 10
TOL = 1e-4       # eval logits and the training loss, relative to the largest
# each gradient in L2 norm: float32 rounding, amplified where a ReLU input
# sits within rounding of 0 (its derivative flips) and by BatchNorm's batch
# statistics, moves gradients by up to 1e-2 at batch 8 (measured: MobileNetV1
# 9.6e-3, ResNet-18 3.5e-3; PyTorch's own float32 against float64: 7.6e-3,
# 2.9e-3); a wrong kernel or a missing term moves them by O(1)
GRAD_TOL = 0.1

# ---- VGG-16 with batch norm ----------------------------------------------------
VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def vgg16_bn():
    layers, c = [], 3
    for v in VGG16:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU()]
            c = v
    layers += [nn.Flatten(), nn.Linear(512, CLASSES)]
    return nn.Sequential(*layers)


def vgg16_bn_text():
    out, c = [], 3
    for v in VGG16:
        if v == "M":
            out.append("MaxPool2d(2)")
        else:
            out += ["Conv2d(%d, %d, 3, padding=1)" % (c, v), "BatchNorm2d(%d)" % v, "ReLU()"]
            c = v
    return out + ["Flatten()", "Linear(512, %d)" % CLASSES]


# ---- ResNets for CIFAR -----------------------------------------------------------
def stages(blocks, widths):
    """(prefix, in, out, stride, projection) of every basic block."""
    c = widths[0]
    for s, (n, w) in enumerate(zip(blocks, widths)):
        for b in range(n):
            stride = 2 if s > 0 and b == 0 else 1
            yield "l%d_%d" % (s + 1, b), c, w, stride, stride != 1 or c != w
            c = w


class ResNetCifar(nn.Module):
    """conv3x3-BN-ReLU stem, basic blocks (conv3x3-BN-ReLU-conv3x3-BN, + the
    shortcut, ReLU), global average pool, Linear."""

    def __init__(self, blocks, widths):
        super().__init__()
        w0 = widths[0]
        self.conv1 = nn.Conv2d(3, w0, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(w0)
        self.blocks = []
        for p, cin, w, stride, proj in stages(blocks, widths):
            self.add_module(p + "_conv1", nn.Conv2d(cin, w, 3, stride=stride, padding=1, bias=False))
            self.add_module(p + "_bn1", nn.BatchNorm2d(w))
            self.add_module(p + "_conv2", nn.Conv2d(w, w, 3, padding=1, bias=False))
            self.add_module(p + "_bn2", nn.BatchNorm2d(w))
            if proj:
                self.add_module(p + "_sc", nn.Conv2d(cin, w, 1, stride=stride, bias=False))
                self.add_module(p + "_scbn", nn.BatchNorm2d(w))
            self.blocks.append((p, proj))
        self.fc = nn.Linear(widths[-1], CLASSES)

    def forward(self, x):
        m = lambda name: getattr(self, name)  # noqa: E731
        out = F.relu(self.bn1(self.conv1(x)))
        for p, proj in self.blocks:
            h = F.relu(m(p + "_bn1")(m(p + "_conv1")(out)))
            h = m(p + "_bn2")(m(p + "_conv2")(h))
            sc = m(p + "_scbn")(m(p + "_sc")(out)) if proj else out
            out = F.relu(h + sc)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


def resnet_text(blocks, widths):
    w0 = widths[0]
    out = ["conv1 = Conv2d(3, %d, 3, padding=1, bias=False)" % w0, "bn1 = BatchNorm2d(%d)" % w0, "stem = ReLU()"]
    prev = "stem"
    for p, cin, w, stride, proj in stages(blocks, widths):
        out.append("")
        s = ", stride=%d" % stride if stride != 1 else ""
        out += ["%s_conv1 = Conv2d(%d, %d, 3%s, padding=1, bias=False)" % (p, cin, w, s), "%s_bn1 = BatchNorm2d(%d)" % (p, w),
                "ReLU()", "%s_conv2 = Conv2d(%d, %d, 3, padding=1, bias=False)" % (p, w, w),
                "%s_bn2 = BatchNorm2d(%d)" % (p, w)]
        if proj:
            out += ["%s_sc = Conv2d(%d, %d, 1%s, bias=False)(%s)      # projection shortcut" % (p, cin, w, s, prev),
                    "%s_scbn = BatchNorm2d(%d)" % (p, w), "Add(%s_bn2)" % p]
        else:
            out.append("Add(%s)" % prev)
        out.append("%s = ReLU()" % p)
        prev = p
    return out + ["", "AdaptiveAvgPool2d(1)", "Flatten()", "fc = Linear(%d, %d)" % (widths[-1], CLASSES)]


# ---- MobileNetV1 for 32x32 -------------------------------------------------------
MOBILENET = [64, (128, 2), 128, (256, 2), 256, (512, 2), 512, 512, 512, 512, 512, (1024, 2), 1024]


def mobilenet_blocks():
    c = 32
    for v in MOBILENET:
        w, stride = v if isinstance(v, tuple) else (v, 1)
        yield c, w, stride
        c = w


def mobilenet_v1():
    layers = [nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU()]
    for c, w, stride in mobilenet_blocks():
        layers += [nn.Conv2d(c, c, 3, stride=stride, padding=1, groups=c, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                   nn.Conv2d(c, w, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, CLASSES)]
    return nn.Sequential(*layers)


def mobilenet_v1_text():
    out = ["Conv2d(3, 32, 3, padding=1, bias=False)", "BatchNorm2d(32)", "ReLU()"]
    for c, w, stride in mobilenet_blocks():
        s = ", stride=%d" % stride if stride != 1 else ""
        out += ["Conv2d(%d, %d, 3%s, padding=1, groups=%d, bias=False)     # depthwise" % (c, c, s, c),
                "BatchNorm2d(%d)" % c, "ReLU()", "Conv2d(%d, %d, 1, bias=False)     # pointwise" % (c, w),
                "BatchNorm2d(%d)" % w, "ReLU()"]
    return out + ["AdaptiveAvgPool2d(1)", "Flatten()", "Linear(1024, %d)" % CLASSES]


# ---- a small GPT of two nn.TransformerEncoderLayer lines ----------------------------
# headroom's one-line block: causal attention (the mask below), batch_first,
# no dropout; one pre-norm GELU block and one post-norm ReLU block.
ENC_V, ENC_T, ENC_C = 50, 8, 16


class EncoderGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(ENC_V, ENC_C)
        self.wpe = nn.Embedding(ENC_T, ENC_C)
        self.enc = nn.ModuleList([
            nn.TransformerEncoderLayer(ENC_C, 2, 32, 0.0, "gelu", batch_first=True, norm_first=True),
            nn.TransformerEncoderLayer(ENC_C, 4, 24, 0.0, "relu", batch_first=True)])
        self.head = nn.Linear(ENC_C, ENC_V)

    def forward(self, x):
        t = x.shape[1]
        h = self.wte(x.long()) + self.wpe(torch.arange(t))
        mask = torch.triu(torch.full((t, t), float("-inf"), dtype=h.dtype), 1)
        for layer in self.enc:
            h = layer(h, src_mask=mask)
        return self.head(h)


def encoder_gpt_text():
    return ["wte = Embedding(%d, %d)" % (ENC_V, ENC_C), "wpe = PositionEmbedding(%d, %d)" % (ENC_T, ENC_C),
            "enc.0 = TransformerEncoderLayer(%d, 2, dim_feedforward=32, dropout=0.0, activation='gelu', "
            "batch_first=True, norm_first=True)" % ENC_C,
            "enc.1 = TransformerEncoderLayer(%d, 4, dim_feedforward=24, dropout=0.0, batch_first=True)" % ENC_C,
            "head = Linear(%d, %d)" % (ENC_C, ENC_V)]


# name: (PyTorch module, model-file lines, model file, its header, published parameter count[, input line])
MODELS = {
    "vgg16_bn": (vgg16_bn, vgg16_bn_text, "bench/models/vgg16_bn.model",
                 "VGG-16 with batch norm for 32x32 images (the CIFAR variant of kuangliu/pytorch-cifar):\n"
                 "13 conv3x3 + BatchNorm2d + ReLU, 5 max pools (32 -> 1), classifier Linear(512, 10).",
                 14728266),
    "resnet18": (lambda: ResNetCifar([2, 2, 2, 2], [64, 128, 256, 512]), lambda: resnet_text([2, 2, 2, 2], [64, 128, 256, 512]),
                 "bench/models/resnet18.model",
                 "ResNet-18 for 32x32 images (kuangliu/pytorch-cifar): a 3x3 stem, no max pool, 4 stages of 2\n"
                 "basic blocks (64/128/256/512 channels, stride 2 from stage 2), 1x1 conv + BN projection\n"
                 "shortcuts where the shape changes, global average pool, Linear(512, 10).",
                 11173962),
    "resnet20": (lambda: ResNetCifar([3, 3, 3], [16, 32, 64]), lambda: resnet_text([3, 3, 3], [16, 32, 64]),
                 "examples/resnet20.model",
                 "ResNet-20 (He et al. 2015, 'Deep Residual Learning', section 4.2, CIFAR-10): a 3x3 stem,\n"
                 "3 stages of 3 basic blocks (16/32/64 channels on 32/16/8 pixels), global average pool,\n"
                 "Linear(64, 10). Shortcuts: identity, and where the shape changes a 1x1 conv + BN\n"
                 "projection (the paper's option B; its CIFAR nets used option A, zero-padded identity,\n"
                 "0.27M parameters; B adds 2,752). `name = Layer(...)` names a layer, Layer(...)(name)\n"
                 "takes that layer's output, Add(name) adds it to the previous output.",
                 272474),
    "mobilenet_v1": (mobilenet_v1, mobilenet_v1_text, "bench/models/mobilenet_v1.model",
                     "MobileNetV1 for 32x32 images (kuangliu/pytorch-cifar): a 3x3 stem (32 channels, stride 1),\n"
                     "13 blocks of depthwise conv3x3 (groups = channels) + BN + ReLU and pointwise conv1x1 +\n"
                     "BN + ReLU (stride 2 into 128, 256, 512 and 1024 channels), global average pool,\n"
                     "Linear(1024, 10).",
                     3217226),
    "encoder_gpt": (EncoderGPT, encoder_gpt_text, "bench/models/encoder_gpt.model",
                    "A small GPT (vocabulary 50, context 8, width 16) of two one-line blocks that PyTorch's\n"
                    "nn.TransformerEncoderLayer is (called with a causal src_mask): pre-norm with GELU,\n"
                    "then post-norm with ReLU; parameters under PyTorch's names (enc.0.self_attn.in_proj_weight).",
                    5962, "input %d" % ENC_T),
}


def model_text(name):
    _, text, _, header, published = MODELS[name][:5]
    lines = ["# " + h for h in header.split("\n")]
    lines += ["# %d parameters; PyTorch: bench/torch_models.py (the same names). Written by" % published,
              "# `bench/torch_models.py write`.", MODELS[name][5] if len(MODELS[name]) > 5 else "input 3 32 32"]
    return "\n".join(lines + text() + ["loss CrossEntropyLoss", ""])


def n_params(m):
    return sum(p.numel() for p in m.parameters())


# ---- safetensors (F32, I64), read with numpy --------------------------------------
def read_safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    hdr.pop("__metadata__", None)
    data, out = b[8 + n:], {}
    for k, v in hdr.items():
        s, e = v["data_offsets"]
        dt = {"F32": np.float32, "I64": np.int64}[v["dtype"]]
        out[k] = torch.from_numpy(np.frombuffer(data[s:e], dtype=dt).copy().reshape(v["shape"]))
    return out


def nmax(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def check_grads(name, m, g):
    """One training step (train-mode BatchNorm: batch statistics) against
    PyTorch's in float64 from the same weights and batch: the loss within TOL
    relative; each gradient within GRAD_TOL of float64's in L2 norm,
    ||hr - f64|| / ||f64||, printed beside PyTorch float32's own error. A
    gradient that is zero in exact arithmetic (a convolution's bias before
    train-mode BatchNorm) must be rounding noise: its norm within GRAD_TOL
    of the model's largest gradient norm, times float32's epsilon scale."""
    m64 = copy.deepcopy(m).double()
    x = g["x"]
    for mm, xx in ((m, x), (m64, x.double())):
        mm.train()
        mm.zero_grad()
        y = mm(xx)
        loss = F.cross_entropy(y.reshape(-1, y.shape[-1]), g["labels"].reshape(-1))
        loss.backward()
    p32 = dict(m.named_parameters())
    lerr = abs(loss.item() - g["loss"].item()) / abs(loss.item())
    top = max(p.grad.norm().item() for p in m64.parameters())
    worst, where, worst32, missing, zeros = 0.0, "", 0.0, [], 0
    for k, p in m64.named_parameters():
        if "grad." + k not in g:
            missing.append(k)
            continue
        h, r = g["grad." + k].double(), p.grad
        if r.norm().item() <= 1e-12 * top:  # zero in exact arithmetic
            zeros += 1
            e, e32 = h.norm().item() / top / 1e-4, 0.0
        else:
            e = ((h - r).norm() / r.norm()).item()
            e32 = ((p32[k].grad.double() - r).norm() / r.norm()).item()
        if os.environ.get("HR_SUITE_DEBUG"):
            print("   %-24s hr %.2e torch32 %.2e" % (k, e, e32))
        worst32 = max(worst32, e32)
        if e > worst:
            worst, where = e, k
    ok = lerr <= TOL and worst <= GRAD_TOL and not missing
    print("%s %-13s training step: loss %.6f (rel err %.1e); %d gradients (%d zero in exact arithmetic) against "
          "float64: worst ||hr - f64|| / ||f64|| = %.2e (%s; bound %.0e; PyTorch float32's worst %.2e)%s"
          % ("OK  " if ok else "FAIL", name, loss.item(), lerr, len(g) - 3, zeros, worst, where, GRAD_TOL, worst32,
             " missing: " + ", ".join(missing) if missing else ""))
    return ok


def check(d):
    torch.set_num_threads(1)
    names = [n for n in MODELS if os.path.exists(os.path.join(d, n + ".ckpt.safetensors"))]
    if not names:
        print("no checkpoints in %s" % d)
        return 1
    bad = 0
    for name in names:
        m = MODELS[name][0]()
        sd = {k: v for k, v in read_safetensors(os.path.join(d, name + ".ckpt.safetensors")).items()
              if not k.startswith("optim.")}
        io = read_safetensors(os.path.join(d, name + ".io.safetensors"))
        try:
            m.load_state_dict(sd, strict=True)
        except RuntimeError as e:
            print("FAIL %s: load_state_dict(strict=True): %s" % (name, e))
            bad += 1
            continue
        m.eval()
        with torch.no_grad():
            y = m(io["x"])
        ref = io["logits"]
        err = nmax(y, ref)
        np_ = n_params(m)
        ok = err <= TOL and np_ == MODELS[name][4]
        bad += not ok
        print("%s %-13s %10d parameters (published %d), %d tensors loaded strictly, eval logits %s: max|hr - torch| / "
              "max|torch| = %.2e (bound %.0e)" % ("OK  " if ok else "FAIL", name, np_, MODELS[name][4], len(sd),
                                                  list(ref.shape), err, TOL))
        gpath = os.path.join(d, name + ".grad.safetensors")
        if os.path.exists(gpath):
            bad += not check_grads(name, m, read_safetensors(gpath))
    return 1 if bad else 0


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "write":
        for name, (_, _, path, _, _) in ((k, v[:5]) for k, v in MODELS.items()):
            with open(os.path.join(ROOT, path), "w") as f:
                f.write(model_text(name))
            print("wrote", path)
        return 0
    if cmd == "params":
        for name, (mk, _, _, _, pub) in ((k, v[:5]) for k, v in MODELS.items()):
            print("%-13s %10d (published %d)" % (name, n_params(mk()), pub))
        return 0
    if cmd == "check" and len(sys.argv) == 3:
        return check(sys.argv[2])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
