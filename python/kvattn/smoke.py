#!/usr/bin/env python3
"""A smoke test of the ctypes binding (kvattn.capi), without NumPy. It
compiles a small cached append, creates a runtime (over whatever driver
$KVATTN_LIBCUDA names, e.g. the test fake), sets the stream, loads the
kernel and launches it:

    PYTHONPATH=python python3 -m kvattn.smoke --lib build/lib/libkvattn_c.so

With --emulated it runs the append on the emulated GPU with real values and
checks the output against a plain-Python attention:

    KVATTN_LIBCUDA=build/lib/libkvattn_cuda_emu.so \
        PYTHONPATH=python python3 -m kvattn.smoke --emulated
"""

import argparse
import json
import math
import struct
import sys

from .capi import KVAttnError, Library, Runtime, find_library


SMOKE_IR = """
func.func @append(%q: tensor<2x4x8x64xbf16>, %k: tensor<2x1x24x64xbf16>,
                  %v: tensor<2x1x24x64xbf16>, %pos: tensor<2xi32>)
    -> tensor<2x4x8x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) causal
      : tensor<2x4x8x64xbf16>, tensor<2x1x24x64xbf16>,
        tensor<2x1x24x64xbf16> -> tensor<2x4x8x64xbf16>
  return %o : tensor<2x4x8x64xbf16>
}
"""


def smoke(library_path):
    api = Library(library_path)
    ptx, manifest = api.compile_to_ptx(SMOKE_IR, "sm_90")
    print("compiled:", "append_kvattn_0" in ptx and
          '"kvattn-launch-manifest"' in manifest)
    try:
        runtime = Runtime(api)
    except KVAttnError as e:
        print("runtime:", e)
        return 0
    runtime.set_stream(0)
    sizes = {"query": 2 * 4 * 8 * 64 * 2, "key": 2 * 24 * 64 * 2,
             "value": 2 * 24 * 64 * 2, "out": 2 * 4 * 8 * 64 * 2}
    buffers = {name: runtime.alloc(n) for name, n in sizes.items()}
    kernel = runtime.load(ptx, manifest)
    kernel.bind((2, 4, 1, 8, 24), buffers, {"q_offset": [16, 16]})
    kernel.launch()
    kernel.launch()
    runtime.synchronize()
    print("launched on stream 0: ok")
    kernel.bind((2, 4, 1, 8, 24), buffers, {"q_offset": [16, -1]})
    try:
        kernel.launch()
    except KVAttnError as e:
        print("bad q_offset:", e)
    kernel.close()
    for ptr in buffers.values():
        runtime.free(ptr)
    runtime.close()
    print("closed")
    return 0


def _bf16(values):
    """float -> bf16 bytes, round to nearest even."""
    out = bytearray()
    for v in values:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        out += struct.pack("<H", bits)
    return bytes(out)


def _from_bf16(data):
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0]
            for h in struct.unpack("<%dH" % (len(data) // 2), data)]


# The smoke's attention with dynamic B, L and S: one kernel for every batch
# and length, GQA-packed (the head counts are static).
DYNAMIC_IR = """
func.func @append(%q: tensor<?x4x?x64xbf16>, %k: tensor<?x1x?x64xbf16>,
                  %v: tensor<?x1x?x64xbf16>, %pos: tensor<?xi32>)
    -> tensor<?x4x?x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>) causal
      : tensor<?x4x?x64xbf16>, tensor<?x1x?x64xbf16>,
        tensor<?x1x?x64xbf16> -> tensor<?x4x?x64xbf16>
  return %o : tensor<?x4x?x64xbf16>
}
"""


def run_emulated(runtime, image, manifest, B, L, S, q_offsets):
    """One launch of an attention kernel (Hq = 4, Hkv = 1, D = 64, bf16,
    lower-right causal from q_offsets) on real values; the largest error
    against a plain-Python attention, relative to 1 + |want|."""
    Hq, D = 4, 64
    rounded = lambda xs: _from_bf16(_bf16(xs))  # noqa: E731
    q = rounded([((i * 37) % 101 - 50) / 64.0 for i in range(B * Hq * L * D)])
    k = rounded([((i * 53) % 97 - 48) / 64.0 for i in range(B * S * D)])
    v = rounded([((i * 29) % 89 - 44) / 16.0 for i in range(B * S * D)])
    buffers = {}
    for name, data in (("query", q), ("key", k), ("value", v)):
        buffers[name] = runtime.alloc(2 * len(data))
        runtime.upload(buffers[name], _bf16(data))
    buffers["out"] = runtime.alloc(2 * B * Hq * L * D)
    kernel = runtime.load(image, manifest)
    kernel.bind((B, Hq, 1, L, S), buffers, {"q_offset": q_offsets})
    kernel.launch()
    runtime.synchronize()
    out = _from_bf16(runtime.download(buffers["out"], 2 * B * Hq * L * D))
    worst = 0.0
    for b in range(B):
        for h in range(Hq):
            for i in range(L):
                qi = q[((b * Hq + h) * L + i) * D:][:D]
                keys = range(q_offsets[b] + i + 1)  # lower-right: j <= qp
                s = [sum(qi[d] * k[(b * S + j) * D + d] for d in range(D))
                     / math.sqrt(D) for j in keys]
                m = max(s)
                p = [math.exp(x - m) for x in s]
                for d in range(D):
                    want = sum(pj * v[(b * S + j) * D + d]
                               for pj, j in zip(p, keys)) / sum(p)
                    got = out[((b * Hq + h) * L + i) * D + d]
                    worst = max(worst, abs(got - want) / (1 + abs(want)))
    kernel.close()
    for ptr in buffers.values():
        runtime.free(ptr)
    return worst


def emulated(library_path):
    """The smoke's append on the emulated GPU ($KVATTN_LIBCUDA naming
    libkvattn_cuda_emu.so): real values in, the output compared with a
    plain-Python attention (lower-right causal, GQA 4/1); then one kernel
    compiled with dynamic B, L, S, launched as an append and as a decode."""
    api = Library(library_path)
    image, manifest = api.compile_to_device_ir(SMOKE_IR, "sm_90")
    print("compiled for the emulator:", "append_kvattn_0" in image and
          "nvptx64" in image)
    runtime = Runtime(api)
    runtime.reserve_metadata(256)
    ok = True
    worst = run_emulated(runtime, image, manifest, 2, 8, 24, [16, 16])
    print("emulated append: max error %.2g %s" %
          (worst, "PASS" if worst < 0.02 else "FAIL"))
    ok &= worst < 0.02
    image, manifest = api.compile_to_device_ir(DYNAMIC_IR, "sm_90")
    tile = json.loads(manifest)["kernels"][0]["tile"]
    print("dynamic shapes: group %d" % tile.get("group", 1))
    for what, (B, L, S, offsets) in (("append", (2, 8, 24, [16, 10])),
                                     ("decode", (3, 1, 40, [39, 20, 0]))):
        worst = run_emulated(runtime, image, manifest, B, L, S, offsets)
        print("emulated dynamic %s B=%d L=%d S=%d: max error %.2g %s" %
              (what, B, L, S, worst, "PASS" if worst < 0.02 else "FAIL"))
        ok &= worst < 0.02
    runtime.close()
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", default=None,
                        help="path of libkvattn_c.so (default: "
                             "$KVATTN_LIBRARY, next to the package, the "
                             "install prefix, $KVATTN_BUILD_DIR or build/)")
    parser.add_argument("--emulated", action="store_true",
                        help="run the append on the emulated GPU and check "
                             "its output (set $KVATTN_LIBCUDA to "
                             "libkvattn_cuda_emu.so)")
    args = parser.parse_args()
    library = args.lib or find_library()
    return emulated(library) if args.emulated else smoke(library)


if __name__ == "__main__":
    sys.exit(main())
