#!/usr/bin/env bash
# seeds.sh — writes the committed seed corpora again: fuzz/corpus/{idx,
# safetensors,checkpoint,cli}. Needs python3 (only its standard library) and a
# CPU build of libheadroom.a, which it makes in build/fuzz/seedlib. The files
# are small and deterministic (gzip with mtime 0), so a rerun changes nothing
# unless the generators or the checkpoint format changed.
set -euo pipefail
cd "$(dirname "$0")/.."
C=fuzz/corpus
B=${FUZZ_OUT:-build/fuzz}/seedlib
rm -rf "$C/idx" "$C/safetensors" "$C/checkpoint" "$C/cli"
mkdir -p "$C/idx" "$C/safetensors" "$C/checkpoint" "$C/cli" "$B"

# ---- IDX: the input is [cut: 2 bytes, big-endian] [images file] [labels file]
python3 - "$C/idx" <<'PY'
import gzip, struct, sys, zlib
d = sys.argv[1]
def images(n, h, w, pix=None, magic=0x803):
    body = bytes(pix) if pix is not None else bytes((i * 37) % 256 for i in range(n * h * w))
    return struct.pack('>IIII', magic, n, h, w) + body
def labels(n, labs=None, magic=0x801):
    return struct.pack('>II', magic, n) + bytes(labs if labs is not None else [i % 10 for i in range(n)])
def gz(b, **kw):
    return gzip.compress(b, mtime=0, **kw)
def seed(name, img, lab):
    assert len(img) < 65536
    open(f'{d}/{name}', 'wb').write(struct.pack('>H', len(img)) + img + lab)
img, lab = images(3, 2, 2), labels(3, [1, 2, 3])
# valid: each pairing of raw and gzip'd, a 28x28 set, compression levels 0, 1, 9
seed('raw_raw', img, lab)
seed('gz_gz', gz(img), gz(lab))
seed('gz_raw', gz(img), lab)
seed('raw_gz', img, gz(lab))
seed('gz_28x28', gz(images(2, 28, 28)), gz(labels(2)))
seed('gz_stored', gz(img, compresslevel=0), gz(lab, compresslevel=0))
seed('gz_level1', gz(images(4, 5, 3), compresslevel=1), gz(labels(4), compresslevel=9))
# gzip header fields zlib skips (FEXTRA, FNAME, FCOMMENT, FHCRC) and two members in one file
def gz_header_fields(b):
    raw = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = raw.compress(b) + raw.flush()
    hdr = b'\x1f\x8b\x08' + bytes([0x04 | 0x08 | 0x10 | 0x02]) + b'\0\0\0\0\0\xff'
    hdr += struct.pack('<H', 4) + b'ab\0\0' + b'train-images\0' + b'a comment\0'
    hdr += struct.pack('<H', zlib.crc32(hdr) & 0xffff)
    return hdr + body + struct.pack('<II', zlib.crc32(b), len(b))
seed('gz_header_fields', gz_header_fields(img), gz(lab))
seed('gz_two_members', gz(img[:9]) + gz(img[9:]), gz(lab[:5]) + gz(lab[5:]))
# almost valid: damaged gzip (cut trailer, cut stream, bad CRC, bad length, bad
# deflate, trailing junk, magic only, empty member)
g = gz(img)
seed('gz_no_trailer', g[:-8], gz(lab))
seed('gz_cut_stream', g[:len(g) // 2], gz(lab))
seed('gz_bad_crc', g[:-8] + bytes([g[-8] ^ 1]) + g[-7:], gz(lab))
seed('gz_bad_isize', g[:-4] + struct.pack('<I', len(img) + 1), gz(lab))
seed('gz_bad_deflate', g[:10] + b'\xff' + g[11:], gz(lab))
seed('gz_trailing_junk', g + b'junk', gz(lab) + b'\0\0\0')
seed('gz_magic_only', b'\x1f\x8b\x08\x00', gz(lab))
seed('gz_empty', gz(b''), gz(lab))
seed('gz_truncated_payload', gz(img[:-3]), gz(lab))
# almost valid: IDX headers (swapped magics, count mismatch, label 10, zero and
# huge dimensions, a claim of 2^32-1 images, truncated header and payload, empty)
seed('labels_as_images', lab, img)
seed('count_mismatch', gz(img), gz(labels(2, [1, 2])))
seed('label_out_of_range', img, labels(3, [1, 10, 3]))
seed('label_255', gz(img), gz(labels(3, [0, 9, 255])))
seed('zero_images', images(0, 2, 2), labels(0))
seed('zero_side', struct.pack('>IIII', 0x803, 1, 0, 2), labels(1))
seed('huge_side', struct.pack('>IIII', 0x803, 1, 16385, 1) + b'\0', labels(1))
seed('huge_count', gz(struct.pack('>IIII', 0x803, 0xffffffff, 28, 28) + b'\0' * 64),
     gz(struct.pack('>II', 0x801, 0xffffffff) + b'\0' * 64))
seed('short_header', img[:10], lab[:6])
seed('short_pixels', img[:-1], lab)
seed('short_labels', img, lab[:-1])
seed('empty_files', b'', b'')
seed('other_dtype', struct.pack('>IIII', 0x80d, 3, 2, 2) + b'\0' * 48, labels(3))
PY

# ---- safetensors: written with json + struct, as the reference layout
python3 - "$C/safetensors" <<'PY'
import json, struct, sys
def write(path, tensors, meta=None, pad=True):
    hdr, off, blob = {}, 0, b''
    if meta is not None: hdr['__metadata__'] = meta
    for name, (dt, shape, data) in tensors.items():
        hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(data)]}
        off += len(data); blob += data
    h = json.dumps(hdr).encode()
    if pad: h += b' ' * ((8 - len(h) % 8) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(h)) + h + blob)
d = sys.argv[1]
write(d + '/small.safetensors', {'0.weight': ('F32', [2, 3], struct.pack('<6f', *range(6))),
                                 '0.bias': ('F32', [2], struct.pack('<2f', 1, 2)),
                                 'optim.0.weight.exp_avg': ('F16', [2, 3], struct.pack('<6e', *range(6))),
                                 'n': ('I64', [], struct.pack('<q', 3))},
      {'format': 'pt', 'headroom.step': '3'})
write(d + '/empty.safetensors', {})
write(d + '/bf16.safetensors', {'w': ('BF16', [1, 2], b'\xc0\x3f\x20\xc1'), 'u': ('U8', [0], b'')})
write(d + '/dtypes.safetensors', {k: (k, [2], bytes(2 * n)) for k, n in
      [('F64', 8), ('F32', 4), ('F16', 2), ('BF16', 2), ('I64', 8), ('I32', 4), ('I16', 2), ('I8', 1),
       ('U8', 1), ('BOOL', 1), ('U16', 2), ('U32', 4), ('U64', 8), ('F8_E4M3', 1), ('F8_E5M2', 1)]})
write(d + '/f64_nan_inf.safetensors', {'x': ('F64', [4], struct.pack('<4d', float('nan'), float('inf'), -1e300, 5e-324))})
write(d + '/f16_specials.safetensors', {'h': ('F16', [4], b'\x00\x7c\x00\xfc\x01\x00\xff\x7b')})
write(d + '/dims8.safetensors', {'t': ('F32', [1] * 8, b'\0\0\x80\x3f')})
write(d + '/unpadded.safetensors', {'a': ('F32', [1], b'\0\0\0\0')}, {'k': 'v'}, pad=False)
write(d + '/unicode_names.safetensors', {'w\u00e9ight': ('F32', [1], b'\0\0\0\0'), 'x\\"y': ('F32', [1], b'\0\0\0\0')})
# almost valid: a gap, an overlap, a shape that does not match the bytes, a header past the end
open(d + '/gap.safetensors', 'wb').write(struct.pack('<Q', 72) + json.dumps(
    {'a': {'dtype': 'F32', 'shape': [1], 'data_offsets': [4, 8]}}).encode().ljust(72) + b'\0' * 8)
open(d + '/overlap.safetensors', 'wb').write(struct.pack('<Q', 128) + json.dumps(
    {'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]},
     'b': {'dtype': 'F32', 'shape': [1], 'data_offsets': [4, 8]}}).encode().ljust(128) + b'\0' * 8)
open(d + '/shape_mismatch.safetensors', 'wb').write(struct.pack('<Q', 64) + json.dumps(
    {'a': {'dtype': 'F32', 'shape': [3], 'data_offsets': [0, 8]}}).encode().ljust(64) + b'\0' * 8)
open(d + '/header_past_end.safetensors', 'wb').write(struct.pack('<Q', 1000) + b'{}')
PY

# ---- checkpoints: saved by headroom after one training step (fuzz/seed_checkpoint.c)
make -s CUDA=0 BUILD="$B" "$B/libheadroom.a"
${CC:-cc} -O1 -g -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -Ifuzz -pthread -o "$B/seed_checkpoint" fuzz/seed_checkpoint.c \
    "$B/libheadroom.a" -lopenblas -lz -lm -pthread -ldl -fopenmp
"$B/seed_checkpoint" "$C/checkpoint"

# ---- command lines: argv[0] is the command, one argument a line
cli() { # name, args...
    local name=$1
    shift
    printf '%s\n' "$@" >"$C/cli/$name"
}
cli plan_budget plan examples/fashion.model --batch 128 --budget 8GiB --json --device cpu
cli plan_infer plan examples/mlp.model --mode infer --batch 1e3 --optim adamw --budget 512MB
cli train_short train examples/mlp.model --data synthetic --samples 64 --batch 8 --max-steps 1 --save m.ckpt
cli train_sgd train m.model --optim sgd --lr 0.1 --momentum 0.9 --nesterov --weight-decay 5e-4 --clip 1.0 \
    --seed 42 --epochs 3 --device auto --memory-stats -q
cli train_resume train m.model --resume m.ckpt --data /data/fashion --quiet --device cuda --mode train --optim adam
cli eval eval m.model --weights m.ckpt --data fashion-mnist --batch 256
cli help train m.model --help
cli help_short plan -h
cli bad_value train m.model --batch 0
cli bad_option plan m.model --frobnicate
cli missing_value train m.model --lr
cli two_models plan a.model b.model
cli no_model eval --weights w
cli unknown_command fit m.model
printf '%s\0' plan examples/mlp.model --batch 64 --budget '1.5 GiB' >"$C/cli/nul_separated"
echo "seeds written to $C"
