#!/usr/bin/env python3
"""Launches append kernels on the emulated GPU with metadata the runtime
would refuse, bypassing its validation: the kernel itself must skip every
row outside the cache and write nothing out of bounds (memcheck would
report it). Drives libkvattn_cuda_emu.so through its CUDA Driver API with
ctypes; the kernels come from kvattn-compile --device-ir (NAME.ll +
NAME.json).

    raw_append.py --emu libkvattn_cuda_emu.so --image DIR/NAME

Prints one line per case and PASS, or exits 1 saying what differs.
"""

import argparse
import ctypes
import json
import struct
import sys


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--emu", required=True)
    p.add_argument("--image", required=True)
    a = p.parse_args()
    cu = ctypes.CDLL(a.emu)
    assert cu.cuInit(0) == 0
    cu.kvattn_emu_take_reports.restype = ctypes.c_char_p
    cu.kvattn_emu_last_error.restype = ctypes.c_char_p
    # Reports are collected, not turned into failed launches.
    cu.kvattn_emu_configure(b"fail-on-report", b"0")
    with open(a.image + ".ll", "rb") as f:
        image = f.read() + b"\0"
    with open(a.image + ".json") as f:
        manifest = json.load(f)
    module = ctypes.c_void_p()
    assert cu.cuModuleLoadDataEx(ctypes.byref(module), image, 0, None,
                                 None) == 0, cu.kvattn_emu_last_error()

    def alloc(values, fmt):
        data = struct.pack(f"<{len(values)}{fmt}", *values)
        ptr = ctypes.c_uint64()
        assert cu.cuMemAlloc_v2(ctypes.byref(ptr), len(data)) == 0
        assert cu.cuMemcpyHtoD_v2(ptr, data, len(data)) == 0
        return ptr.value, len(data)

    def download(ptr, nbytes, fmt, n):
        buf = ctypes.create_string_buffer(nbytes)
        assert cu.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(ptr), nbytes) == 0
        return list(struct.unpack(f"<{n}{fmt}", buf.raw))

    failed = False
    for kernel in manifest["kernels"]:
        name = kernel["name"]
        params = {p["name"]: p for p in kernel["params"]}
        upd_shape = params["update"]["shape"]
        cache_shape = params["cache"]["shape"]
        b, h, l, d = upd_shape
        paged = "block_table" in params
        # Distinct values: update 1000 + i, cache -(1 + i).
        n_upd = b * h * l * d
        n_cache = cache_shape[0] * cache_shape[1] * cache_shape[2] * d
        update = [1000.0 + i for i in range(n_upd)]
        cache = [-(1.0 + i) for i in range(n_cache)]
        if paged:
            # Batch 0: token 1 -> page 2 row 1; token 2 -> slot 1 = page 7
            # (out of range [0, 3)). Batch 1: token 1 -> page 0 row 1;
            # token 2 -> slot 1 = -1.
            pos = [1, 1]
            table = [2, 7, 0, -1]
        else:
            # Batch 0 at -1: token -1 skipped, token 0 -> row 0. Batch 1 at
            # 3 with capacity 4: token 3 -> row 3, token 4 skipped.
            pos = [-1, 3]
        expect = list(cache)
        page_size = cache_shape[1] if paged else 0
        for bi in range(b):
            for t in range(l):
                p_ = pos[bi] + t
                for hi in range(h):
                    for x in range(d):
                        src = ((bi * h + hi) * l + t) * d + x
                        if paged:
                            slot = p_ // page_size
                            page = table[bi * 2 + slot] if p_ >= 0 and \
                                slot < 2 else -1
                            if not 0 <= page < cache_shape[0]:
                                continue
                            dst = ((page * page_size + p_ % page_size) * h +
                                   hi) * d + x
                        else:
                            if not 0 <= p_ < cache_shape[2]:
                                continue
                            dst = ((bi * h + hi) * cache_shape[2] + p_) * d + x
                        expect[dst] = update[src]
        u_ptr, _ = alloc(update, "f")
        c_ptr, c_bytes = alloc(cache, "f")
        pos_ptr, _ = alloc(pos, "i")
        pointers = {"update": u_ptr, "cache": c_ptr, "pos": pos_ptr}
        sizes = {"B": b, "Hkv": h, "L": l}
        if paged:
            pointers["block_table"], _ = alloc(table, "i")
            sizes.update(num_pages=cache_shape[0], page_size=page_size,
                         max_pages=2, S=2 * page_size)
        else:
            sizes["S"] = cache_shape[2]
        slots = [ctypes.c_uint64(pointers[p["name"]] if p["kind"] == "pointer"
                                 else sizes[p["name"]])
                 for p in kernel["params"]]
        args = (ctypes.c_void_p * len(slots))(
            *[ctypes.cast(ctypes.byref(s), ctypes.c_void_p) for s in slots])
        func = ctypes.c_void_p()
        assert cu.cuModuleGetFunction(ctypes.byref(func), module,
                                      name.encode()) == 0
        grid = -(-(b * l) // kernel["tile"]["block_m"])
        r = cu.cuLaunchKernel(func, grid, 1, 1, kernel["block"]["x"], 1, 1, 0,
                              None, args, None)
        reports = cu.kvattn_emu_take_reports().decode()
        got = download(c_ptr, c_bytes, "f", n_cache)
        ok = r == 0 and not reports and got == expect
        print(f"{name}: launch={r} reports={'none' if not reports else reports}"
              f" cache={'as expected' if got == expect else 'WRONG'}")
        failed |= not ok
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
