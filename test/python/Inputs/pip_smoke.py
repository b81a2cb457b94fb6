"""After `pip install`: the package imports from site-packages (not the
checkout), says its version, finds its library without any environment and
runs the CPU path and, when the library is inside the package, the emulated
GPU (test/python/pip-install.test)."""
import os
import sys

import numpy as np

import kvattn
import kvattn.capi

IR = """
func.func @f(%q: tensor<1x2x3x8xf32>, %k: tensor<1x1x5x8xf32>,
             %v: tensor<1x1x5x8xf32>, %o: tensor<1xi32>) -> tensor<1x2x3x8xf32> {
  %r = kvattn.attention %q, %k, %v q_offset(%o : tensor<1xi32>) causal
      : tensor<1x2x3x8xf32>, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32>
      -> tensor<1x2x3x8xf32>
  return %r : tensor<1x2x3x8xf32>
}
"""

print("version", kvattn.__version__)
print("from site-packages:", "site-packages" in kvattn.__file__)
path = kvattn.library().path
print("library in the package:",
      os.path.dirname(path) == os.path.dirname(kvattn.__file__),
      os.path.basename(path))
rng = np.random.default_rng(0)
q = rng.standard_normal((1, 2, 3, 8)).astype(np.float32)
k = rng.standard_normal((1, 1, 5, 8)).astype(np.float32)
v = np.arange(40, dtype=np.float32).reshape(1, 1, 5, 8)
out = kvattn.compile(IR, threads=1).run(q, k, v, np.array([2], np.int32))
# Row 0 sits at position 2: keys 0..2 only; its output is a convex mix of
# v rows 0..2, so it stays below row 3's values.
print("cpu ok:", bool(np.all(out[0, :, 0] < 24)), out.shape)
if sys.argv[1:] == ["--emulated"]:
    prog = kvattn.compile(IR, target="gpu",
                          runtime=kvattn.Runtime(driver="emulated"))
    gpu = prog.run(query=q, key=k, value=v, q_offset=[2])
    print("emulated gpu matches:", bool(np.allclose(gpu, out, atol=1e-5)))
