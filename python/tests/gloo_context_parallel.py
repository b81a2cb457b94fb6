"""kvattn.distributed.context_parallel_attention over torch.distributed:
2, 3 and 4 CPU processes (gloo on loopback), random ownership maps and page
placements, bf16 and f32: every rank's result is bitwise the one-rank
result (and that one matches the reference: test_context_parallel.py); a
bad map, a rank with another map and a rank that exits are KVAttnErrors on
the other ranks, not hangs. Not collected by python/tests' own run (its
name): test/python/context-parallel.test runs it with the interpreter that
has PyTorch."""
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import torch  # noqa: F401 (lit runs this file only where torch imports)

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "cp_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(tmp_path, world, dtypes, seed, fault=""):
    """Runs `world` ranks; returns DIR with their out/lse/error files."""
    d = tmp_path / f"w{world}-{seed}-{fault or 'ok'}"
    d.mkdir()
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(WORKER)] + env.get("PYTHONPATH", "").split(os.pathsep))
    procs = [subprocess.Popen(
        [sys.executable, WORKER, str(d), str(r), str(world), str(port), dtypes,
         str(seed)] + ([fault] if fault else []), env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for r in range(world)]
    for r, p in enumerate(procs):
        try:
            output, _ = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            pytest.fail(f"rank {r} of {world} hung (no result in 180 s)")
        if p.returncode not in (0, 3):
            pytest.fail(f"rank {r} exited with {p.returncode}:\n"
                        f"{output.decode()[-3000:]}")
    return d


def test_every_world_size_gives_the_one_rank_result(tmp_path):
    single = launch(tmp_path, 1, "f32,bf16", 0)
    for world, seed in ((2, 1), (3, 2), (4, 3)):
        d = launch(tmp_path, world, "f32,bf16", seed)
        for dtype in ("f32", "bf16"):
            for name in ("out", "lse"):
                want = np.load(single / f"{name}0-{dtype}.npy")
                for r in range(world):
                    got = np.load(d / f"{name}{r}-{dtype}.npy")
                    assert got.tobytes() == want.tobytes(), (world, r, dtype,
                                                             name)


def test_errors_reach_every_rank(tmp_path):
    d = launch(tmp_path, 2, "f32", 4, "hole")
    for r in range(2):
        text = (d / f"error{r}.txt").read_text()
        assert "failed on rank 0 of 2" in text
        assert "block 2 of sequence 1 (keys 16..23) has no owner" in text
    d = launch(tmp_path, 3, "f32", 5, "stale")
    for r in range(3):
        assert "rank(s) [2] hold a different cp_block_owners" in \
            (d / f"error{r}.txt").read_text()
    d = launch(tmp_path, 3, "f32", 6, "exit")
    for r in (0, 2):
        text = (d / f"error{r}.txt").read_text()
        assert f"on rank {r} of 3: the exchange of partial states failed" in \
            text, text
