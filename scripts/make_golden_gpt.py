#!/usr/bin/python3
"""make_golden_gpt.py — PyTorch's side of the GPT golden test: the weights of
tests/golden/gpt_tiny.model after 60 AdamW steps in PyTorch (bench/torch_gpt.py's
GPT, nanoGPT's module names, lm_head tied to the token embedding) on
tests/golden/gpt_tiny.txt, and the validation loss and next-token accuracy that
PyTorch computes for them, into tests/golden/gpt_tiny.safetensors (metadata
golden.val_loss, golden.accuracy). The test (tests/test_cli.c, test_text) loads
them with `headroom eval` and must print the same numbers.

    /usr/bin/python3 scripts/make_golden_gpt.py
"""
import os
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "bench"))
sys.path.insert(0, here)
import torch_gpt  # noqa: E402
from make_golden import write_safetensors  # noqa: E402

BLOCK, LAYERS, HEADS, WIDTH = 16, 2, 2, 16
root = os.path.join(here, "..", "tests", "golden")


def main():
    torch.manual_seed(5)
    torch.set_num_threads(1)
    tr, va = torch_gpt.windows(os.path.join(root, "gpt_tiny.txt"), BLOCK)
    model = torch_gpt.GPT(block=BLOCK, layers=LAYERS, heads=HEADS, c=WIDTH)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(60):
        idx = torch.randint(0, tr[0].shape[0], (8,))
        lg = model(tr[0][idx])
        loss = F.cross_entropy(lg.view(-1, 256), tr[1][idx].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    vl = torch_gpt.val_loss(model, va, torch.device("cpu"), 8)
    with torch.no_grad():
        right = cnt = 0
        for i in range(va[0].shape[0]):
            p = model(va[0][i:i + 1]).argmax(-1)
            right += (p == va[1][i:i + 1]).sum().item()
            cnt += BLOCK
    sd = model.state_dict()  # both names of the tied weight, as PyTorch keeps them
    tensors = [(k, v.detach().numpy().astype("float32")) for k, v in sd.items()]
    write_safetensors(os.path.join(root, "gpt_tiny.safetensors"), tensors,
                      {"format": "pt", "golden.val_loss": "%.6f" % vl, "golden.accuracy": "%.6f" % (right / cnt),
                       "golden.torch": torch.__version__})
    print("gpt_tiny: %d tensors, val loss %.6f, accuracy %.4f (torch %s)" % (len(tensors), vl, right / cnt,
                                                                          torch.__version__))


if __name__ == "__main__":
    main()
