# -*- Python -*-
# The kvattn lit suite: IR tests, diagnostics and numerics.

import os
import shutil
import subprocess
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "kvattn"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kvattn_obj_root, "test")
# unit/ is its own suite (GoogleTest format); Inputs/ holds data files.
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py",
                   "Inputs", "unit", "consumer", "fakecuda", "gpu", "corpus"]

llvm_config.with_system_environment(["HOME", "TMP", "TEMP"])
llvm_config.use_default_substitutions()
config.substitutions.append(("%kvattn_src_root", config.kvattn_src_root))
config.substitutions.append(("%kvattn_obj_root", config.kvattn_obj_root))

llvm_config.add_tool_substitutions(["kvattn-opt", "kvattn-run"],
                                   [config.kvattn_tools_dir])
llvm_config.with_environment("PATH", config.kvattn_tools_dir,
                             append_path=True)
# FileCheck, not, count from LLVM 22.
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

# The ASan + UBSan build (scripts/sanitize.sh).
if config.kvattn_sanitize.upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("sanitizers")

# One kvattn.attention case built from flags and run by kvattn-run
# (test/Numerics/Inputs/attention_case.py).
config.substitutions.append(
    ("%attention-case",
     "%s %s --kvattn-run %s" % (
         sys.executable,
         os.path.join(config.kvattn_src_root, "test", "Numerics", "Inputs",
                      "attention_case.py"),
         os.path.join(config.kvattn_tools_dir, "kvattn-run"))))

# Draft-token trees (tree_parents) for attention_case.py's --tree-parents.
config.substitutions.append(
    ("%make-tree-parents",
     "%s %s" % (sys.executable,
                os.path.join(config.kvattn_src_root, "test", "Numerics",
                             "Inputs", "tree_parents.py"))))

# The fake CUDA driver of the runtime tests (test/fakecuda).
config.substitutions.append(
    ("%fakecuda", os.path.join(config.kvattn_obj_root, "test", "fakecuda",
                               "libkvattn_fake_cuda.so")))

# kvattn as a plugin of upstream mlir-opt (lib/Plugin; not built under
# sanitizers).
config.substitutions.append(
    ("%kvattn_plugin", os.path.join(config.kvattn_obj_root, "lib",
                                    "KVAttnPlugin.so")))

# The emulated GPU's driver (lib/GpuEmu).
config.substitutions.append(
    ("%emucuda", os.path.join(config.kvattn_obj_root, "lib",
                              "libkvattn_cuda_emu.so")))

# The CUDA toolkit: libdevice for the NVVM target is found through
# CUDA_HOME (lit scrubs the environment), and `ptxas` is an optional tool
# that PTX tests REQUIRE.
cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
config.environment["CUDA_HOME"] = cuda_home
# The kernel cache of compileToPtx (docs/runtime.md): a directory of this
# run's own, emptied when the suite starts, never the user's.
kernel_cache = os.path.join(config.kvattn_obj_root, "test", "kernel-cache")
shutil.rmtree(kernel_cache, ignore_errors=True)
config.environment["KVATTN_CACHE_DIR"] = kernel_cache
if os.path.exists(os.path.join(cuda_home, "nvvm", "libdevice",
                               "libdevice.10.bc")):
    # kvattn-compile links libdevice for exp/log/tanh.
    config.available_features.add("libdevice")
ptxas = os.path.join(cuda_home, "bin", "ptxas")
if not os.access(ptxas, os.X_OK):
    ptxas = shutil.which("ptxas")
if ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))
    # One kernel of the case matrix: compile, check the manifest against the
    # PTX entry, assemble with ptxas -v (test/Target/Inputs/check_kernel.py).
    config.substitutions.append(
        ("%check-kernel",
         "%s %s --kvattn-compile %s --ptxas %s --case %s" % (
             sys.executable,
             os.path.join(config.kvattn_src_root, "test", "Target", "Inputs",
                          "check_kernel.py"),
             os.path.join(config.kvattn_tools_dir, "kvattn-compile"),
             ptxas,
             os.path.join(config.kvattn_src_root, "test", "Numerics",
                          "Inputs", "attention_case.py"))))

# The Python package's tests (python/tests) need NumPy and pytest, which
# the pyenv interpreter lit may run under lacks: Debian's python3 with
# python3-numpy and python3-pytest (scripts/setup.sh installs them), or
# $KVATTN_TEST_PYTHON.
python_debian = os.environ.get("KVATTN_TEST_PYTHON", "/usr/bin/python3")
try:
    subprocess.run([python_debian, "-c", "import numpy, pytest"],
                   check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=60)
    config.available_features.add("python-numpy")
    config.substitutions.append(("%numpy_python", python_debian))
except (OSError, subprocess.SubprocessError):
    pass

# kvattn.torch's tests (python/torch_tests) with the PyTorch environment
# scripts/setup.sh installs (build/torch-venv), or $KVATTN_TORCH_PYTHON. Not a
# feature: without it those tests fail rather than skip.
config.substitutions.append(
    ("%torch_python", os.environ.get(
        "KVATTN_TORCH_PYTHON",
        os.path.join(config.kvattn_obj_root, "torch-venv", "bin", "python"))))

# An upstream-dialect SDPA program run by upstream MLIR (mlir-opt +
# mlir-runner) and, raised by -kvattn-raise-sdpa, by kvattn-run; the two
# results compared (test/Numerics/Inputs/raise_compare.py).
mlir_lib_dir = os.path.join(os.path.dirname(config.llvm_tools_dir), "lib")
config.substitutions.append(
    ("%raise-compare",
     "%s %s --kvattn-opt %s --kvattn-run %s --mlir-opt %s --mlir-runner %s "
     "--runner-libs %s,%s" % (
         sys.executable,
         os.path.join(config.kvattn_src_root, "test", "Numerics", "Inputs",
                      "raise_compare.py"),
         os.path.join(config.kvattn_tools_dir, "kvattn-opt"),
         os.path.join(config.kvattn_tools_dir, "kvattn-run"),
         os.path.join(config.llvm_tools_dir, "mlir-opt"),
         os.path.join(config.llvm_tools_dir, "mlir-runner"),
         os.path.join(mlir_lib_dir, "libmlir_runner_utils.so"),
         os.path.join(mlir_lib_dir, "libmlir_c_runner_utils.so"))))
