"""Writes the update of test/Numerics/Inputs/fp8-quantise.mlir (f32
[1, 4, 128, 256]) to argv[1]: every bf16 bit pattern (zeros, subnormals,
infinities, NaNs, the largest values) as f32, the midpoints between
consecutive codes of f8E4M3FN and f8E5M2 (the rounding ties, at the
saturation edge too) and one f32 ulp on each side of them, and seeded f32
bit patterns for the rest."""
import sys

import numpy as np


def grid(m, bias, top):
    codes = np.arange(top + 1)
    e, f = codes >> m, codes & ((1 << m) - 1)
    return np.where(e == 0, f * 2.0 ** (1 - bias - m),
                    (f + (1 << m)) * 2.0 ** (e - bias - m))


parts = [(np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)]
for m, bias, top in ((3, 7, 0x7E), (2, 15, 0x7B)):
    g = grid(m, bias, top)
    # The midpoints, and the one past the largest finite value.
    mids = np.append((g[:-1] + g[1:]) / 2, g[-1] + (g[-1] - g[-2]) / 2)
    mids = mids.astype(np.float32)
    for x in (mids, np.nextafter(mids, np.float32(0)),
              np.nextafter(mids, np.float32(np.inf))):
        parts += [x, -x]
values = np.concatenate(parts).astype(np.float32)
n = 4 * 128 * 256
rng = np.random.default_rng(36)
rest = rng.integers(0, 1 << 32, n - values.size, dtype=np.uint64)
values = np.concatenate([values, rest.astype(np.uint32).view(np.float32)])
np.save(sys.argv[1], values.reshape(1, 4, 128, 256))
