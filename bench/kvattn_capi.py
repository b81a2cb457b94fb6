#!/usr/bin/env python3
"""ctypes bindings of the kvattn C API (include/kvattn-c/KVAttn.h).

libkvattn_c.so is built from lib/CAPI (target KVAttnCAPIShared) into
BUILD/lib/. No other Python package is needed. Run as a script, it is a smoke
test of the bindings: compile a small cached append, create a runtime (over
whatever driver $KVATTN_LIBCUDA names, e.g. the test fake), set the stream,
load the kernel and launch it:

    python3 bench/kvattn_capi.py --lib build/lib/libkvattn_c.so
"""

import argparse
import ctypes
import os
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
        lib.kvattn_runtime_create.argtypes = [ctypes.POINTER(vp), err]
        lib.kvattn_runtime_destroy.argtypes = [vp]
        lib.kvattn_runtime_destroy.restype = None
        lib.kvattn_runtime_set_stream.argtypes = [vp, ctypes.c_uint64, err]
        lib.kvattn_runtime_use_own_stream.argtypes = [vp, err]
        lib.kvattn_device_alloc.argtypes = [
            vp, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64), err]
        lib.kvattn_device_free.argtypes = [vp, ctypes.c_uint64, err]
        lib.kvattn_synchronize.argtypes = [vp, err]
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

    def use_own_stream(self):
        self._call("kvattn_runtime_use_own_stream")

    def alloc(self, nbytes):
        ptr = ctypes.c_uint64()
        self._call("kvattn_device_alloc", ctypes.c_size_t(nbytes),
                   ctypes.byref(ptr))
        return ptr.value

    def free(self, ptr):
        self._call("kvattn_device_free", ctypes.c_uint64(ptr))

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", default=None,
                        help="path of libkvattn_c.so (default: "
                             "$KVATTN_BUILD_DIR or build/, then lib/)")
    args = parser.parse_args()
    return smoke(args.lib or default_library())


if __name__ == "__main__":
    sys.exit(main())
