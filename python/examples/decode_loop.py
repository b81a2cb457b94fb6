"""A continuous-batching decode loop over a paged KV cache with kvattn.plan.

The plan is made once; each step's metadata (q_offset, kv_len, block_table)
is written into device buffers allocated once (here from NumPy with a
synchronous copy: a serving engine produces it on the device), and
Plan.run takes only device tensors: no allocation, copy or synchronisation,
which each step's call counts show. The output is checked against NumPy.

    KVATTN_LIBCUDA=build/lib/libkvattn_cuda_emu.so \\
        PYTHONPATH=python python3 python/examples/decode_loop.py
"""

import numpy as np

import kvattn

IR = """
func.func @decode(%q: tensor<?x4x1x64xbf16>,
                  %k: tensor<?x16x1x64xbf16>, %v: tensor<?x16x1x64xbf16>,
                  %pos: tensor<?xi32>, %len: tensor<?xi32>,
                  %table: tensor<?x?xi32>) -> tensor<?x4x1x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>)
      kv_len(%len : tensor<?xi32>) block_table(%table : tensor<?x?xi32>)
      causal : tensor<?x4x1x64xbf16>, tensor<?x16x1x64xbf16>,
      tensor<?x16x1x64xbf16> -> tensor<?x4x1x64xbf16>
  return %o : tensor<?x4x1x64xbf16>
}
"""

PAGES, PAGE, MAX_PAGES, MAX_B = 12, 16, 4, 3


class Rows:
    """The first rows of a device buffer, as a framework tensor would expose
    them (__cuda_array_interface__): no copy."""

    def __init__(self, array, shape):
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": "<i4", "data": (array.ptr, False),
            "strides": None, "version": 3}


def main():
    rt = kvattn.default_runtime()
    rng = np.random.default_rng(0)
    kp = kvattn.to_bf16(rng.uniform(-1, 1, (PAGES, PAGE, 1, 64)))
    vp = kvattn.to_bf16(rng.uniform(-1, 1, (PAGES, PAGE, 1, 64)))
    dk, dv = kvattn.to_device(kp, rt), kvattn.to_device(vp, rt)
    plan = kvattn.plan(IR, runtime=rt,
                       max_sizes={"B": MAX_B, "max_pages": MAX_PAGES})
    # Device metadata buffers, allocated once (the largest batch).
    d_pos = rt.empty((MAX_B,), "i32")
    d_len = rt.empty((MAX_B,), "i32")
    d_table = rt.empty((MAX_B, MAX_PAGES), "i32")
    # Sequences: (first step, last step, prompt length, pages).
    seqs = [(0, 5, 5, [0, 1]), (0, 9, 20, [2, 3, 4]), (2, 9, 1, [5, 6])]
    worst = 0.0
    for step in range(8):
        batch = [s for s in seqs if s[0] <= step <= s[1]]
        B = len(batch)
        lens = np.array([s[2] + step - s[0] for s in batch], np.int32)
        table = np.full((B, MAX_PAGES), -1, np.int32)
        for b, s in enumerate(batch):
            table[b, :len(s[3])] = s[3]
        pos = lens - 1
        q = kvattn.to_bf16(rng.uniform(-1, 1, (B, 4, 1, 64)))
        dq, dout = kvattn.to_device(q, rt), rt.empty((B, 4, 1, 64), "bf16")
        # The metadata of this step into the first B rows of each buffer
        # (the engine's part), then views of those rows.
        padded = np.full((MAX_B, MAX_PAGES), -1, np.int32)
        padded[:B] = table
        d_pos.copy_from(np.resize(pos, MAX_B).astype(np.int32))
        d_len.copy_from(np.resize(lens, MAX_B).astype(np.int32))
        d_table.copy_from(padded)
        mp, ml = Rows(d_pos, (B,)), Rows(d_len, (B,))
        mt = Rows(d_table, (B, MAX_PAGES))
        plan.call_counts(reset=True)
        plan.run(query=dq, key=dk, value=dv, out=dout, q_offset=mp,
                 kv_len=ml, block_table=mt)
        c = plan.call_counts()
        plan.check()
        out = kvattn.from_bf16(dout.numpy())
        # NumPy reference over the gathered pages.
        k = np.zeros((B, 1, MAX_PAGES * PAGE, 64), np.float32)
        v = np.zeros_like(k)
        for b in range(B):
            for slot, p in enumerate(table[b]):
                if p >= 0:
                    k[b, 0, slot * PAGE:(slot + 1) * PAGE] = \
                        kvattn.from_bf16(kp[p, :, 0])
                    v[b, 0, slot * PAGE:(slot + 1) * PAGE] = \
                        kvattn.from_bf16(vp[p, :, 0])
        qf = kvattn.from_bf16(q)
        for b in range(B):
            n = lens[b]
            s = qf[b, :, 0] @ k[b, 0, :n].T / 8.0
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            worst = max(worst, float(np.abs(out[b, :, 0] - p @ v[b, 0, :n])
                                     .max()))
        print(f"step {step}: B={B} kv_len={','.join(map(str, lens))} | run: "
              f"launches={c['launches']} syncs={c['synchronizations']} "
              f"allocs={c['allocations']} "
              f"copies={c['synchronous_copies'] + c['async_copies']}")
        dq.free()
        dout.free()
    print(f"max error {worst:.3g}: {'PASS' if worst < 3e-2 else 'FAIL'}")
    plan.close()


if __name__ == "__main__":
    main()
