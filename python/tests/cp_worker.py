"""One rank of gloo_context_parallel.py: joins a gloo process group on
loopback, runs kvattn.distributed.context_parallel_attention on its share
of the blocks (cp_data: the same seeds in every process; this rank's own
page placement) and writes out/lse (or the KVAttnError's text) to DIR.

    cp_worker.py DIR RANK WORLD PORT DTYPES OWNER_SEED [FAULT]

DTYPES: comma-separated (f32,bf16): one run each in the same group.

FAULT: "exit" (this rank exits before the exchange), "hole" (a map with an
unowned block), "stale" (this rank holds another ownership map)."""
import datetime
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import kvattn
from kvattn import context_parallel as cpar
from kvattn.distributed import context_parallel_attention

from cp_data import BS, KV_LEN, cache, random_owners, rank_pages

out_dir, rank, world, port, dtypes, seed = sys.argv[1:7]
fault = sys.argv[7] if len(sys.argv) > 7 else ""
rank, world, port, seed = int(rank), int(world), int(port), int(seed)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                        rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=20))

def tensor(a):
    if a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


owners = random_owners(world, seed)
if fault == "hole":
    owners[1, 2] = -1
if fault == "stale" and rank == world - 1:
    # Ranks 0 and 1 swapped: this rank's own blocks are the same, so its
    # partials succeed and only the maps' digests differ.
    owners = np.where(owners == 0, 1, np.where(owners == 1, 0, owners))
ownership = cpar.Ownership(random_owners(world, seed), KV_LEN, BS, world)
if fault == "exit" and rank == 1:
    os._exit(3)
for dtype in dtypes.split(","):
    q, k, v = cache(dtype)
    kp, vp, table = rank_pages(k, v, ownership, rank, 1000 * seed + rank)
    try:
        out, lse = context_parallel_attention(
            tensor(q), tensor(kp), tensor(vp), torch.from_numpy(table),
            torch.from_numpy(KV_LEN), torch.from_numpy(owners))
    except kvattn.KVAttnError as e:
        with open(os.path.join(out_dir, f"error{rank}.txt"), "w") as f:
            f.write(str(e))
        # Not sys.exit: after a failed collective, tearing the gloo group
        # down at interpreter exit may abort the process (std::terminate);
        # the error is what this rank had to report.
        os._exit(0)
    if out.dtype == torch.bfloat16:
        out = out.view(torch.int16)
    np.save(os.path.join(out_dir, f"out{rank}-{dtype}.npy"), out.numpy())
    np.save(os.path.join(out_dir, f"lse{rank}-{dtype}.npy"), lse.numpy())
dist.destroy_process_group()
