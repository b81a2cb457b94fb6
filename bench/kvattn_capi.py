#!/usr/bin/env python3
"""ctypes bindings of the kvattn C API (include/kvattn-c/KVAttn.h).

libkvattn_c.so is built from lib/CAPI (target KVAttnCAPIShared) into
BUILD/lib/. No other Python package is needed. Run as a script, it is a smoke
test of the bindings: compile a small cached append, create a runtime (over
whatever driver $KVATTN_LIBCUDA names, e.g. the test fake), set the stream,
load the kernel and launch it:

    python3 bench/kvattn_capi.py --lib build/lib/libkvattn_c.so

With --emulated it runs the append on the emulated GPU with real values and
checks the output against a plain-Python attention:

    KVATTN_LIBCUDA=build/lib/libkvattn_cuda_emu.so \
        python3 bench/kvattn_capi.py --emulated
"""

import argparse
import json
import ctypes
import math
import os
import struct
import sys


class KVAttnError(RuntimeError):
    pass


class _Sizes(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("B", "Hq", "Hkv", "L", "S",
                                              "num_pages", "page_size",
                                              "max_pages")]


class _Buffer(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("device_ptr", ctypes.c_uint64)]


class _Metadata(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p),
                ("values", ctypes.POINTER(ctypes.c_int64)),
                ("count", ctypes.c_size_t)]


def default_library(build_dir=None):
    """BUILD/lib/libkvattn_c.so; BUILD is build_dir, $KVATTN_BUILD_DIR or
    the repository's build/."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = build_dir or os.environ.get("KVATTN_BUILD_DIR") or \
        os.path.join(root, "build")
    return os.path.join(build, "lib", "libkvattn_c.so")


class Library:
    """The C API of one libkvattn_c.so."""

    def __init__(self, path):
        if not os.path.exists(path):
            raise KVAttnError(
                f"{path} does not exist: build the KVAttnCAPIShared target "
                "(ninja -C BUILD KVAttnCAPIShared) or pass the library path")
        lib = ctypes.CDLL(path)
        err = ctypes.POINTER(ctypes.c_void_p)
        vp = ctypes.c_void_p
        lib.kvattn_free.argtypes = [vp]
        lib.kvattn_free.restype = None
        lib.kvattn_compile_to_ptx.argtypes = [
            ctypes.c_char_p, ctypes.c_char_p, err, err, err]
        lib.kvattn_compile_to_device_ir.argtypes = [
            ctypes.c_char_p, ctypes.c_char_p, err, err, err]
        lib.kvattn_runtime_create.argtypes = [ctypes.POINTER(vp), err]
        lib.kvattn_runtime_destroy.argtypes = [vp]
        lib.kvattn_runtime_destroy.restype = None
        lib.kvattn_runtime_set_stream.argtypes = [vp, ctypes.c_uint64, err]
        lib.kvattn_runtime_use_own_stream.argtypes = [vp, err]
        lib.kvattn_runtime_reserve_metadata.argtypes = [
            vp, ctypes.c_size_t, err]
        lib.kvattn_device_alloc.argtypes = [
            vp, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64), err]
        lib.kvattn_device_free.argtypes = [vp, ctypes.c_uint64, err]
        lib.kvattn_synchronize.argtypes = [vp, err]
        lib.kvattn_copy_to_device.argtypes = [
            vp, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, err]
        lib.kvattn_copy_to_host.argtypes = [
            vp, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, err]
        lib.kvattn_kernel_load.argtypes = [
            vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
            ctypes.POINTER(vp), err]
        lib.kvattn_kernel_launch.argtypes = [
            vp, _Sizes, ctypes.POINTER(_Buffer), ctypes.c_size_t,
            ctypes.POINTER(_Metadata), ctypes.c_size_t, err]
        lib.kvattn_kernel_destroy.argtypes = [vp]
        lib.kvattn_kernel_destroy.restype = None
        self.lib = lib

    def _take(self, ptr):
        """A string the API returned, freed."""
        if not ptr:
            return ""
        text = ctypes.string_at(ptr).decode()
        self.lib.kvattn_free(ptr)
        return text

    def check(self, rc, error, what):
        if rc != 0:
            raise KVAttnError(f"{what}: {self._take(error.value)}")

    def compile_to_device_ir(self, ir, chip):
        """The emulated GPU's image (device LLVM IR) and its manifest."""
        image, manifest, error = (ctypes.c_void_p(), ctypes.c_void_p(),
                                  ctypes.c_void_p())
        rc = self.lib.kvattn_compile_to_device_ir(
            ir.encode(), chip.encode(), ctypes.byref(image),
            ctypes.byref(manifest), ctypes.byref(error))
        self.check(rc, error, "kvattn_compile_to_device_ir")
        return self._take(image.value), self._take(manifest.value)

    def compile_to_ptx(self, ir, chip):
        """(ptx, manifest_json) of every kvattn.attention of `ir`."""
        ptx, manifest, error = (ctypes.c_void_p(), ctypes.c_void_p(),
                                ctypes.c_void_p())
        rc = self.lib.kvattn_compile_to_ptx(
            ir.encode(), chip.encode(), ctypes.byref(ptx),
            ctypes.byref(manifest), ctypes.byref(error))
        self.check(rc, error, "kvattn_compile_to_ptx")
        return self._take(ptx.value), self._take(manifest.value)


class Runtime:
    """kvattn_runtime: the driver, device 0, its primary context."""

    def __init__(self, library):
        self.api = library
        self.handle = ctypes.c_void_p()
        error = ctypes.c_void_p()
        rc = library.lib.kvattn_runtime_create(ctypes.byref(self.handle),
                                               ctypes.byref(error))
        library.check(rc, error, "kvattn_runtime_create")

    def _call(self, name, *args):
        error = ctypes.c_void_p()
        rc = getattr(self.api.lib, name)(self.handle, *args,
                                         ctypes.byref(error))
        self.api.check(rc, error, name)

    def set_stream(self, stream):
        """Launch on a CUstream (e.g. torch.cuda.current_stream().cuda_stream)."""
        self._call("kvattn_runtime_set_stream", ctypes.c_uint64(stream))

    def reserve_metadata(self, nbytes):
        """Allocates the metadata slots up front (a plan step)."""
        self._call("kvattn_runtime_reserve_metadata", nbytes)

    def use_own_stream(self):
        self._call("kvattn_runtime_use_own_stream")

    def alloc(self, nbytes):
        ptr = ctypes.c_uint64()
        self._call("kvattn_device_alloc", ctypes.c_size_t(nbytes),
                   ctypes.byref(ptr))
        return ptr.value

    def free(self, ptr):
        self._call("kvattn_device_free", ctypes.c_uint64(ptr))

    def upload(self, ptr, data):
        """Copies bytes to device memory."""
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        self._call("kvattn_copy_to_device", ctypes.c_uint64(ptr), buf,
                   ctypes.c_size_t(len(data)))

    def download(self, ptr, nbytes):
        """Copies bytes from device memory."""
        buf = ctypes.create_string_buffer(nbytes)
        self._call("kvattn_copy_to_host", buf, ctypes.c_uint64(ptr),
                   ctypes.c_size_t(nbytes))
        return buf.raw

    def synchronize(self):
        self._call("kvattn_synchronize")

    def load(self, ptx, manifest_json, index=0):
        return Kernel(self, ptx, manifest_json, index)

    def close(self):
        if self.handle:
            self.api.lib.kvattn_runtime_destroy(self.handle)
            self.handle = ctypes.c_void_p()


class Kernel:
    """A loaded kernel; bind() its arguments once, then launch() cheaply."""

    def __init__(self, runtime, ptx, manifest_json, index):
        self.runtime = runtime
        self.api = runtime.api
        self.handle = ctypes.c_void_p()
        error = ctypes.c_void_p()
        rc = self.api.lib.kvattn_kernel_load(
            runtime.handle, ptx.encode(), manifest_json.encode(), index,
            ctypes.byref(self.handle), ctypes.byref(error))
        self.api.check(rc, error, "kvattn_kernel_load")
        self._args = None

    def bind(self, sizes, buffers, metadata):
        """sizes: (B, Hq, Hkv, L, S); buffers: {name: device pointer};
        metadata: {name: [ints]} (host values, validated at each launch)."""
        self._keep = [n.encode() for n in list(buffers) + list(metadata)]
        names = iter(self._keep)
        bufs = (_Buffer * len(buffers))(
            *[_Buffer(next(names), int(p)) for p in buffers.values()])
        arrays = [(ctypes.c_int64 * len(v))(*v) for v in metadata.values()]
        meta = (_Metadata * len(metadata))(
            *[_Metadata(next(names), a, len(a)) for a in arrays])
        self._arrays = arrays
        self._args = (_Sizes(*sizes), bufs, len(buffers), meta, len(metadata))

    def launch(self):
        error = ctypes.c_void_p()
        rc = self.api.lib.kvattn_kernel_launch(self.handle, *self._args,
                                               ctypes.byref(error))
        self.api.check(rc, error, "kvattn_kernel_launch")

    def close(self):
        if self.handle:
            self.api.lib.kvattn_kernel_destroy(self.handle)
            self.handle = ctypes.c_void_p()


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
                             "$KVATTN_BUILD_DIR or build/, then lib/)")
    parser.add_argument("--emulated", action="store_true",
                        help="run the append on the emulated GPU and check "
                             "its output (set $KVATTN_LIBCUDA to "
                             "libkvattn_cuda_emu.so)")
    args = parser.parse_args()
    library = args.lib or default_library()
    return emulated(library) if args.emulated else smoke(library)


if __name__ == "__main__":
    sys.exit(main())
