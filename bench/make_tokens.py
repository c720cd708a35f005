#!/usr/bin/env python3
"""make_tokens.py — a text file as llm.c / nanoGPT token files, one token per byte.

    make_tokens.py TEXT OUT_TRAIN.bin [OUT_VAL.bin] [--val-fraction 0.1] [--min-tokens N]
    make_tokens.py --check FILE.bin      (print the header and the first tokens)

llm.c's .bin format (llmc/dataloader.h): a header of 256 int32 (magic 20240520,
version 1, number of tokens), then the tokens as uint16 little-endian. Each byte
0..255 of the text is one token id (valid ids for GPT-2's 50257 vocabulary).
With OUT_VAL.bin, the last --val-fraction of the bytes go to it, the rest to
OUT_TRAIN.bin; without it, all bytes go to OUT_TRAIN.bin. llm.c's loader needs
at least B*T+1 tokens in every file (per process): --min-tokens repeats a
file's text until it holds that many. Its loader seeks with an int offset, so a
file must stay under 2 GiB. Standard library only.
"""
import argparse
import struct
import sys

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
MAX_BYTES = 2**31 - 1  # llm.c: fseek(file, (int) offset, ...)


def write_tokens(path, data, min_tokens):
    if not data:
        sys.exit(f"make_tokens: no tokens for {path}")
    reps = max(1, -(-min_tokens // len(data)))
    ntok = len(data) * reps
    if HEADER_INTS * 4 + 2 * ntok > MAX_BYTES:
        sys.exit(f"make_tokens: {path} would hold {ntok} tokens, over llm.c's 2 GiB file limit")
    header = [0] * HEADER_INTS
    header[0:3] = [MAGIC, VERSION, ntok]
    # byte b -> uint16 little-endian (b, 0)
    body = bytearray(2 * len(data))
    body[0::2] = data
    with open(path, "wb") as f:
        f.write(struct.pack("<%di" % HEADER_INTS, *header))
        for _ in range(reps):
            f.write(body)
    return ntok, reps


def read_tokens(path):
    with open(path, "rb") as f:
        header = struct.unpack("<%di" % HEADER_INTS, f.read(4 * HEADER_INTS))
        body = f.read()
    if header[0] != MAGIC or header[1] != VERSION:
        sys.exit(f"make_tokens: {path}: bad magic/version {header[:2]}")
    if len(body) != 2 * header[2]:
        sys.exit(f"make_tokens: {path}: header says {header[2]} tokens, file holds {len(body) / 2}")
    return header, struct.unpack("<%dH" % header[2], body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("text", nargs="?")
    ap.add_argument("train", nargs="?")
    ap.add_argument("val", nargs="?")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--min-tokens", type=int, default=0,
                    help="repeat a file's text until it holds this many tokens (llm.c needs B*T+1)")
    ap.add_argument("--check", metavar="FILE", help="read FILE back and print its header and first tokens")
    a = ap.parse_args()
    if a.check:
        header, toks = read_tokens(a.check)
        print(f"{a.check}: magic {header[0]} version {header[1]} tokens {header[2]} "
              f"max id {max(toks) if toks else None} first {list(toks[:16])}")
        return
    if not a.text or not a.train:
        ap.error("TEXT and OUT_TRAIN.bin are needed")
    data = open(a.text, "rb").read()
    if a.val:
        if not 0.0 < a.val_fraction < 1.0:
            ap.error("--val-fraction must be in (0, 1)")
        nval = max(1, int(len(data) * a.val_fraction))
        parts = [(a.train, data[:-nval]), (a.val, data[-nval:])]
    else:
        parts = [(a.train, data)]
    for path, d in parts:
        ntok, reps = write_tokens(path, d, a.min_tokens)
        print(f"make_tokens: {path}: {ntok} tokens ({len(d)} bytes x {reps})", file=sys.stderr)


if __name__ == "__main__":
    main()
