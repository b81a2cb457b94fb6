#!/usr/bin/env python3
"""The PTX corpus: every attention case the GPU lit tests compile, as PTX.

    python3 scripts/ptx_corpus.py OUT_DIR [--build build] [--jobs 2]

Collects the kvattn.attention cases of the GPU lit tests (the
`%attention-case` and `%check-kernel` RUN lines of test/GpuEmu, test/Target
and test/Numerics, their DEFINE'd parts expanded; the tree parents files
they make are made too), adds the examples and the .mlir inputs of the PTX
tests, and compiles each with kvattn-compile for the chips the test names
(or sm_80 and sm_90a; one case in three also for sm_86, sm_89 and sm_90;
FP8 cases also for sm_89 with PTX 8.1 and sm_90), with the compile options
of the RUN line (tensor-cores, split-kv, block sizes, ...). Writes
OUT_DIR/<hash>.ptx (a hash of the case and its flags, independent of the
checkout's path and of the other cases) and OUT_DIR/index.txt (name,
command); the kernel cache is off. A kernel already in OUT_DIR is kept (an
interrupted run resumes). Two corpora diff with `diff -r A B` (scripts/ptx-corpus.sh).
A change that must not change the kernels leaves the diff empty.
"""

import argparse
import concurrent.futures
import hashlib
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_DIRS = ["test/GpuEmu", "test/Target", "test/Numerics"]
# kvattn-run / check_kernel options that shape a kernel, and whether they
# take a value as the next word.
COMPILE_FLAGS = {"--tensor-cores": False, "--split-kv": True,
                 "--block-m": True, "--block-n": True, "--num-warps": True,
                 "--num-stages": True, "--pack-gqa": False,
                 "--index-bitwidth": True, "--chip": True, "--features": True,
                 "--num-sms": True}
DEFAULT_CHIPS = ["sm_80", "sm_90a"]
EXTRA_CHIPS = ["sm_86", "sm_89", "sm_90"]


def run_lines(path):
    """The RUN lines of a test, continuations joined, DEFINEs expanded."""
    defines = {}
    lines = []
    pending = ""
    with open(path) as f:
        for raw in f:
            m = re.search(r"(RUN|DEFINE|REDEFINE):\s?(.*)$", raw)
            if not m:
                continue
            kind, text = m.group(1), m.group(2).rstrip()
            if kind == "RUN":
                if text.endswith("\\"):
                    pending += text[:-1] + " "
                    continue
                text = pending + text
                pending = ""
                for _ in range(5):
                    for k, v in defines.items():
                        text = text.replace(k, v)
                lines.append(text)
            else:
                dm = re.match(r"\s*(%\{[^}]+\})\s*=\s*(.*)$", text)
                if dm:
                    defines[dm.group(1)] = dm.group(2)
    return lines


def split_tool_flags(words):
    """The kernel-shaping options among a tool's words, normalised."""
    out = []
    i = 0
    while i < len(words):
        w = words[i]
        name = w.split("=", 1)[0]
        if name in COMPILE_FLAGS:
            if "=" in w or not COMPILE_FLAGS[name]:
                out.append(w if "=" in w else w)
            elif i + 1 < len(words):
                out.append("%s=%s" % (name, words[i + 1]))
                i += 1
        i += 1
    return out


# attention_case.py options that change only the data, not the IR.
DATA_FLAGS = {"--poison", "--poison-invalid", "--poison-key", "--seed"}


def drop_data_flags(case):
    out = []
    skip = False
    for w in case:
        if skip:
            skip = False
            continue
        if w.split("=", 1)[0] in DATA_FLAGS:
            skip = "=" not in w
            continue
        out.append(w)
    return out


def collect(tmp):
    """(case flags, tool flags) pairs, and the tree files made on the way."""
    cases = []
    for d in TEST_DIRS:
        full = os.path.join(ROOT, d)
        for name in sorted(os.listdir(full)):
            path = os.path.join(full, name)
            if not os.path.isfile(path) or not name.endswith((".test", ".mlir")):
                continue
            t = os.path.join(tmp, name)
            for line in run_lines(path):
                line = (line.replace("%kvattn_src_root", ROOT)
                        .replace("%S", full).replace("%t", t))
                for cmd in line.split("|"):
                    cmd = cmd.strip()
                    if cmd.startswith("not "):
                        cmd = cmd[4:]
                    if "%make-tree-parents" in cmd:
                        cmd = cmd.replace(
                            "%make-tree-parents",
                            "%s %s" % (sys.executable, os.path.join(
                                ROOT, "test/Numerics/Inputs/tree_parents.py")))
                        subprocess.run(cmd, shell=True, cwd=tmp,
                                       stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
                        continue
                    for marker in ("%attention-case", "%check-kernel"):
                        if marker not in cmd:
                            continue
                        rest = cmd.split(marker, 1)[1]
                        rest = rest.split(">", 1)[0]
                        try:
                            words = shlex.split(rest)
                        except ValueError:
                            continue
                        if marker == "%check-kernel":
                            # check_kernel.py: its own options, then the case.
                            if "--" not in words:
                                continue
                            k = words.index("--")
                            tool, case = words[:k], words[k + 1:]
                            chips = [tool[j + 1] for j, w in enumerate(tool)
                                     if w == "--chip"]
                            tool = [w for j, w in enumerate(tool)
                                    if w != "--chip" and
                                    (j == 0 or tool[j - 1] != "--chip")]
                            flags = split_tool_flags(tool)
                            for c in chips:
                                cases.append((case, flags + ["--chip=" + c]))
                        else:
                            if "--" in words:
                                k = words.index("--")
                                case, tool = words[:k], words[k + 1:]
                            else:
                                case, tool = words, []
                            if "--target=cpu" in tool:
                                continue
                            cases.append((case, split_tool_flags(tool)))
    return cases


def compile_one(job):
    name, out_dir, build, ir_cmd, ir_path, compile_cmd = job
    if os.path.exists(os.path.join(out_dir, name + ".json")):
        return name, "ok"  # an earlier run of this corpus made it
    if ir_cmd:
        with open(ir_path, "w") as f:
            r = subprocess.run(ir_cmd, stdout=f, stderr=subprocess.PIPE)
        if r.returncode != 0:
            return name, "ir-failed"
    r = subprocess.run(compile_cmd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        with open(os.path.join(out_dir, name + ".err"), "w") as f:
            f.write(r.stderr)
        return name, "compile-failed"
    return name, "ok"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--jobs", type=int, default=2)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    compiler = os.path.join(a.build, "bin", "kvattn-compile")
    case_py = os.path.join(ROOT, "test/Numerics/Inputs/attention_case.py")
    tmp = tempfile.mkdtemp(prefix="ptx-corpus-")
    env_chips = []
    jobs = []
    seen = set()

    def stable(text):
        # The temporary directory (tree-parent files), the checkout and the
        # interpreter are left out, so that two runs name the same case
        # alike, whatever tree or worktree they ran from (diff -r).
        return (text.replace(tmp, "$TMP").replace(ROOT, "$ROOT")
                .replace(sys.executable, "$PYTHON"))

    def add(ir_cmd, src, flags):
        key = stable(" ".join(ir_cmd or [src]) + " :: " + " ".join(flags))
        if key in seen:
            return
        seen.add(key)
        # Named by the case alone (not its place in the list): a case a
        # test adds or drops leaves the others' names as they were.
        name = hashlib.sha256(key.encode()).hexdigest()[:16]
        ir_path = os.path.join(tmp, name + ".mlir") if ir_cmd else src
        cmd = [compiler, ir_path, "-o", os.path.join(a.out, name),
               "--kernel-cache=false"] + flags
        jobs.append((name, a.out, a.build, ir_cmd, ir_path, cmd, key))

    cases = collect(tmp)
    for case, flags in cases:
        case = drop_data_flags([w for w in case if w != "--ir-only"])
        ir_cmd = [sys.executable, case_py, "--ir-only"] + case
        chips = [f.split("=", 1)[1] for f in flags if f.startswith("--chip=")]
        rest = [f for f in flags if not f.startswith("--chip=")]
        if not chips:
            chips = list(DEFAULT_CHIPS)
            # One case in three, chosen by the case (not its place), also
            # for the other chips.
            which = stable(" ".join(case + rest))
            if int(hashlib.sha256(which.encode()).hexdigest(), 16) % 3 == 0:
                chips += EXTRA_CHIPS
        if "--kv-dtype" in case:
            chips += ["sm_90", "sm_89:+ptx81"]
        for chip in chips:
            c, _, feat = chip.partition(":")
            extra = ["--features=" + feat] if feat else []
            add(ir_cmd, None, rest + ["--chip=" + c] + extra)
    # The examples and the .mlir inputs of the PTX tests.
    for src in sorted(os.listdir(os.path.join(ROOT, "examples"))):
        if src.endswith(".mlir"):
            for chip in DEFAULT_CHIPS + EXTRA_CHIPS:
                add(None, os.path.join(ROOT, "examples", src),
                    ["--chip=" + chip])
    for src in ["test/Target/Inputs/cache-case.mlir", "test/Target/ptx.mlir"]:
        for chip in DEFAULT_CHIPS + EXTRA_CHIPS:
            add(None, os.path.join(ROOT, src), ["--chip=" + chip])

    failed = 0
    with open(os.path.join(a.out, "index.txt"), "w") as index:
        for j in jobs:
            index.write("%s %s\n" % (j[0], j[6]))
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for name, status in pool.map(compile_one, [j[:6] for j in jobs]):
            if status != "ok":
                failed += 1
                with open(os.path.join(a.out, name + ".status"), "w") as f:
                    f.write(status + "\n")
    # The manifests' diagnostics and the refusals name the source file: its
    # path, too, is the checkout's or the temporary directory's.
    for j in jobs:
        for ext in (".json", ".err"):
            path = os.path.join(a.out, j[0] + ext)
            if not os.path.exists(path):
                continue
            with open(path) as f:
                text = f.read()
            fixed = text.replace(tmp, "$TMP").replace(ROOT, "$ROOT")
            if fixed != text:
                with open(path, "w") as f:
                    f.write(fixed)
    print("%d kernels compiled, %d failed (see *.status, *.err) in %s" %
          (len(jobs) - failed, failed, a.out))


if __name__ == "__main__":
    main()
