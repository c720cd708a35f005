"""hr_rng — the counter-based RNG that headroom's C tests and the PyTorch golden
generator (scripts/make_golden.py) share, so that initial weights and inputs
never have to be stored in full. Everything is wrapping (mod 2**64) unsigned
64-bit arithmetic; the C side (uint64_t) reproduces every value bit-exactly.

    splitmix64(x):                        # the standard SplitMix64 output step
        z = x + 0x9E3779B97F4A7C15
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB
        return z ^ (z >> 31)

    key(seed, stream) = (seed * 0x100000001B3) ^ (stream * 0x9E3779B97F4A7C15)

    uniform(seed, stream, n)[i] = (float)(splitmix64(key(seed, stream) + i) >> 40)
                                  * 2**-24                 for i in 0 .. n-1

The top 24 bits, as an integer in [0, 2**24), convert to float32 exactly, and
the scale by 2**-24 is exact: u is a float32 in [0, 1), a multiple of 2**-24.
Derived values (see docs/golden.md for the full contract):

    symmetric(u)      = 2*u - 1                  (exact in float32, in [-1, 1))
    param             = (float)((double)(2*u - 1) * (1.0 / sqrt((double)fan_in)))
    label             = min(floor((double)u * 10), 9)

C equivalent:

    static uint64_t splitmix64(uint64_t x) {
        uint64_t z = x + 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    static float hr_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
        uint64_t key = (seed * 0x100000001B3ull) ^ (stream * 0x9E3779B97F4A7C15ull);
        return (float)(splitmix64(key + i) >> 40) * 0x1p-24f;
    }
"""

import math

import numpy as np

GAMMA = 0x9E3779B97F4A7C15
MUL1 = 0xBF58476D1CE4E5B9
MUL2 = 0x94D049BB133111EB
FNV_PRIME = 0x100000001B3
MASK64 = (1 << 64) - 1


def splitmix64(x):
    """SplitMix64 output function on a numpy uint64 array (wrapping)."""
    z = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(MUL1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(MUL2)
        z = z ^ (z >> np.uint64(31))
    return z


def splitmix64_int(x):
    """The same on one Python int (reference, used by the self-test)."""
    z = (x + GAMMA) & MASK64
    z = ((z ^ (z >> 30)) * MUL1) & MASK64
    z = ((z ^ (z >> 27)) * MUL2) & MASK64
    return z ^ (z >> 31)


def key(seed, stream):
    return ((seed * FNV_PRIME) & MASK64) ^ ((stream * GAMMA) & MASK64)


def uniform(seed, stream, n):
    """float32 array u[i] = (splitmix64(key(seed, stream) + i) >> 40) * 2**-24,
    i = 0..n-1, where key(seed, stream) = (seed*0x100000001B3) ^ (stream*0x9E3779B97F4A7C15)
    and every operation wraps mod 2**64."""
    k = np.uint64(key(seed, stream))
    with np.errstate(over="ignore"):
        ctr = np.arange(n, dtype=np.uint64) + k
    top = splitmix64(ctr) >> np.uint64(40)
    return top.astype(np.float32) * np.float32(2.0**-24)


def symmetric(seed, stream, n):
    """2u - 1 in [-1, 1), float32 (exact)."""
    return np.float32(2.0) * uniform(seed, stream, n) - np.float32(1.0)


def param_init(seed, stream, n, fan_in):
    """bound * (2u - 1), bound = 1/sqrt(fan_in): the product is taken in float64
    and rounded once to float32."""
    bound = 1.0 / math.sqrt(float(fan_in))
    return (symmetric(seed, stream, n).astype(np.float64) * bound).astype(np.float32)


def labels(seed, stream, n, classes=10):
    """floor(u * classes) in float64 (exact), clamped to classes-1, as int32."""
    v = np.floor(uniform(seed, stream, n).astype(np.float64) * classes)
    return np.minimum(v, classes - 1).astype(np.int32)


if __name__ == "__main__":
    # Self-test and a few values for the C side's unit test.
    xs = [0, 1, 2, 1234, MASK64]
    for x in xs:
        assert int(splitmix64(np.array([x], dtype=np.uint64))[0]) == splitmix64_int(x)
    # splitmix64 seeded with 0 yields 0xE220A8397B1DCDAF first (well-known value).
    assert splitmix64_int(0) == 0xE220A8397B1DCDAF
    print("splitmix64(0)      = 0x%016X" % splitmix64_int(0))
    print("splitmix64(1)      = 0x%016X" % splitmix64_int(1))
    print("key(1234, 1)       = 0x%016X" % key(1234, 1))
    u = uniform(1234, 1, 4)
    print("uniform(1234,1,4)  =", [float(v) for v in u], [int(v * 2**24) for v in u])
    print("labels(1234,2,8)   =", labels(1234, 2, 8).tolist())
    print("param(1234,1000,4,fan_in=1000) =", [float(v).hex() for v in param_init(1234, 1000, 4, 1000)])
