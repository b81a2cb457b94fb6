#!/usr/bin/env python3
"""Runs one function of an upstream-dialect SDPA program twice and compares.

1. The ORIGINAL program, evaluated by upstream MLIR alone: a generated
   @main calls the function on constant inputs and prints the result; the
   module goes through mlir-opt (TOSA to linalg when --tosa, one-shot
   bufferize, linalg to loops, everything to LLVM) and mlir-runner.
2. The RAISED program: kvattn-opt -kvattn-raise-sdpa, checked to contain a
   kvattn op and no contraction any more, then kvattn-run --target=cpu on
   the same inputs (the kvattn-to-cpu pipeline, JIT).

Inputs are deterministic: float element n of argument a is
((37 n + 11 a) mod 41 - 20) / 16, exact in f32 and varying along every axis
(so a causal mask aligned one key off changes the result). Integer
arguments are given with --int ARG=VALUE (cache positions). The results
must agree element by element within |got - want| <= atol + rtol |want|
(default 2e-5 each, kvattn's f32 tolerance; mlir-runner prints 6
significant digits, well inside it). Uses the standard library only.
"""

import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile


SOFTMAX_SCHEDULE = """
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %sm = transform.structured.match ops{["linalg.softmax"]} in %root : (!transform.any_op) -> !transform.any_op
    %d = transform.structured.decompose_interface %sm : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}
"""


def fail(msg):
    print("raise_compare: FAIL: " + msg)
    sys.exit(1)


def parse_signature(text, entry):
    m = re.search(r"func\.func @" + re.escape(entry) + r"\((.*?)\)\s*->\s*"
                  r"\(?(tensor<[^>]*>)", text, re.S)
    if not m:
        fail("no function @%s with a tensor result" % entry)
    args = re.findall(r"%[\w]+\s*:\s*(tensor<[^>]*>|index)", m.group(1))
    return args, m.group(2)


def shape_of(t):
    body = t[len("tensor<"):-1]
    parts = body.split("x")
    return [int(p) for p in parts[:-1]], parts[-1]


def values_for(arg_no, shape):
    n = 1
    for d in shape:
        n *= d
    return [((37 * i + 11 * arg_no) % 41 - 20) / 16.0 for i in range(n)]


def dense_literal(vals, shape, elt):
    def rec(off, dims):
        if not dims:
            return repr(vals[off]) if elt.startswith("f") else str(vals[off])
        step = 1
        for d in dims[1:]:
            step *= d
        return "[" + ", ".join(rec(off + k * step, dims[1:])
                               for k in range(dims[0])) + "]"
    if not shape:
        return rec(0, [])
    return rec(0, shape)


def run(cmd, stdin=None):
    p = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        fail("%s exited with %d:\n%s%s" % (" ".join(cmd), p.returncode,
                                          p.stdout, p.stderr))
    return p.stdout


def read_npy_f32(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        fail("%s is not .npy" % path)
    hlen = struct.unpack("<H", data[8:10])[0]
    header = data[10:10 + hlen].decode("latin1")
    if "'<f4'" not in header:
        fail("%s: expected float32, header %s" % (path, header))
    raw = data[10 + hlen:]
    return list(struct.unpack("<%df" % (len(raw) // 4), raw))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--entry", required=True)
    ap.add_argument("--int", action="append", default=[],
                    help="ARG=VALUE for an integer argument")
    ap.add_argument("--kvattn-int", action="append", default=[],
                    help="ARG=VALUE overriding --int on the kvattn side only "
                         "(to show that a wrong position fails)")
    ap.add_argument("--tosa", action="store_true")
    ap.add_argument("--empty-rows-zero", action="store_true",
                    help="a row with no allowed key: upstream NaN, kvattn "
                         "exactly 0 (the documented difference)")
    ap.add_argument("--atol", type=float, default=2e-5)
    ap.add_argument("--rtol", type=float, default=2e-5)
    ap.add_argument("--kvattn-opt", required=True)
    ap.add_argument("--kvattn-run", required=True)
    ap.add_argument("--mlir-opt", required=True)
    ap.add_argument("--mlir-runner", required=True)
    ap.add_argument("--runner-libs", required=True)
    a = ap.parse_args()

    text = open(a.file).read()
    args, result = parse_signature(text, a.entry)
    ints = dict(kv.split("=") for kv in a.int)
    kv_ints = dict(ints)
    kv_ints.update(dict(kv.split("=") for kv in a.kvattn_int))
    rshape, relt = shape_of(result)
    if relt != "f32":
        fail("only f32 results are compared")

    tmp = tempfile.mkdtemp(prefix="raise-compare-")
    # --- the original, through upstream MLIR -------------------------------
    lines = ["func.func private @printMemrefF32(memref<*xf32>)",
             "func.func @main() {"]
    names = []
    kv_inputs = []
    for i, t in enumerate(args):
        shape, elt = shape_of(t)
        if elt.startswith("f"):
            vals = values_for(i, shape)
        elif str(i) in ints:
            n = 1
            for d in shape:
                n *= d
            vals = [int(ints[str(i)])] * n
        else:
            fail("integer argument %d needs --int %d=VALUE" % (i, i))
        lines.append("  %%a%d = arith.constant dense<%s> : %s" %
                     (i, dense_literal(vals, shape, elt), t))
        names.append("%%a%d" % i)
        if elt.startswith("f"):
            kv_inputs.append("%d=%s" % (i, ",".join(repr(v) for v in vals)))
        else:
            kv_inputs.append("%d=%s" % (i, kv_ints[str(i)]))
    rtype = result
    memref = "memref<" + result[len("tensor<"):]
    lines.append("  %%r = call @%s(%s) : (%s) -> %s" %
                 (a.entry, ", ".join(names), ", ".join(args), rtype))
    lines.append("  %%b = bufferization.to_buffer %%r : %s to %s" %
                 (rtype, memref))
    lines.append("  %%u = memref.cast %%b : %s to memref<*xf32>" % memref)
    lines.append("  call @printMemrefF32(%u) : (memref<*xf32>) -> ()")
    lines.append("  return")
    lines.append("}")
    driver = os.path.join(tmp, "driver.mlir")
    with open(driver, "w") as f:
        f.write(text + "\n" + "\n".join(lines) + "\n")
    passes = []
    if a.tosa:
        passes.append("--pass-pipeline=builtin.module(func.func("
                      "tosa-to-linalg-named,tosa-to-linalg,tosa-to-arith,"
                      "tosa-to-tensor))")
    if "linalg.softmax" in text:
        # Upstream lowers linalg.softmax only through its decomposition (a
        # transform op); the schedule is erased afterwards.
        with open(driver, "a") as f:
            f.write(SOFTMAX_SCHEDULE)
        decomposed = os.path.join(tmp, "decomposed.mlir")
        run([a.mlir_opt, driver, "--transform-interpreter",
             "--test-transform-dialect-erase-schedule", "-o", decomposed])
        driver = decomposed
    lowered = driver
    if passes:
        lowered = os.path.join(tmp, "linalg.mlir")
        run([a.mlir_opt, driver] + passes + ["-o", lowered])
    llvm = os.path.join(tmp, "llvm.mlir")
    run([a.mlir_opt, lowered,
         "--one-shot-bufferize=bufferize-function-boundaries "
         "function-boundary-type-conversion=identity-layout-map",
         "--convert-linalg-to-loops", "--expand-strided-metadata",
         "--lower-affine", "--convert-scf-to-cf", "--convert-math-to-llvm",
         "--convert-to-llvm", "--reconcile-unrealized-casts", "-o", llvm])
    out = run([a.mlir_runner, llvm, "-e", "main",
               "-entry-point-result=void", "-shared-libs=" + a.runner_libs])
    if "data =" not in out:
        fail("no memref printed by mlir-runner:\n" + out)
    want = [float(x) for x in re.findall(
        r"[-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf)",
        out.split("data =", 1)[1])]

    # --- the raised program, through kvattn -------------------------------
    raised = run([a.kvattn_opt, a.file, "-kvattn-raise-sdpa"])
    body = ""
    for chunk in raised.split("func.func ")[1:]:
        if re.match(r"(private )?@" + re.escape(a.entry) + r"\(", chunk):
            body = chunk
    if not body:
        fail("@%s is missing after raising" % a.entry)
    if "kvattn.sdpa" not in body and "kvattn.attention" not in body:
        fail("@%s was not raised:\n%s" % (a.entry, body))
    if re.search(r"linalg\.(batch_)?matmul|tosa\.matmul|linalg\.softmax",
                 body):
        fail("@%s still has a contraction or softmax after raising:\n%s" %
             (a.entry, body))
    raised_file = os.path.join(tmp, "raised.mlir")
    with open(raised_file, "w") as f:
        f.write(raised)
    dump = os.path.join(tmp, "kv")
    cmd = [a.kvattn_run, raised_file, "--target=cpu", "--entry=" + a.entry,
           "--dump-outputs", dump]
    for inp in kv_inputs:
        cmd += ["--input", inp]
    run(cmd)
    got = read_npy_f32(os.path.join(dump, "out0.npy"))

    n = 1
    for d in rshape:
        n *= d
    if len(want) != n or len(got) != n:
        fail("sizes: upstream printed %d values, kvattn gave %d, expected %d"
             % (len(want), len(got), n))
    worst = 0.0
    bad = 0
    empty = 0
    for i, (w, g) in enumerate(zip(want, got)):
        if a.empty_rows_zero and w != w:
            # A softmax over only -inf: kvattn's out is 0 (semantics.md).
            empty += 1
            if g != 0.0:
                if bad < 5:
                    print("  element %d: upstream NaN (no allowed key), "
                          "kvattn %r, not 0" % (i, g))
                bad += 1
            continue
        err = abs(w - g)
        worst = max(worst, err)
        if not err <= a.atol + a.rtol * abs(w):
            if bad < 5:
                print("  element %d: upstream %r, kvattn %r" % (i, w, g))
            bad += 1
    if a.empty_rows_zero:
        print("raise_compare: %d elements in rows with no allowed key" % empty)
    status = "PASS" if bad == 0 else "FAIL"
    print("raise_compare: @%s %d elements max_abs_err=%.3g atol=%g rtol=%g "
          "%s" % (a.entry, n, worst, a.atol, a.rtol, status))
    sys.exit(0 if bad == 0 else 1)


if __name__ == "__main__":
    main()
