"""Downloads (pinned), extracts and compiles the peers' kernels into a cache.

Nothing here is copied into the repository: every peer artifact lives under
BUILD/peers/ and is rebuilt only when missing.  Each step is idempotent, so a
second run of bench/peers/run.py only reads the cache.
"""
import hashlib
import os
import re
import subprocess
import sys
import urllib.request
import zipfile

# Pinned registry packages.  Wheels/sdists are fetched with pip (or, for the
# flash-attn sdist, whose metadata step imports torch, straight from the
# index URL with its sha256 checked).
PINS = {
    "nvdisasm": ("nvidia-cuda-nvdisasm", "13.5.37"),
    "cuobjdump": ("nvidia-cuda-cuobjdump", "13.5.37"),
    "flash-attn": ("flash-attn", "2.8.3.post2"),
    "sgl-kernel": ("sgl-kernel", "0.3.21"),
    "sglang": ("sglang", "0.5.23"),
    "triton": ("triton", "3.5.1"),
    "flashinfer-python": ("flashinfer-python", "0.6.13"),
    "flashinfer-cubin": ("flashinfer-cubin", "0.6.13"),
}
FLASH_ATTN_SDIST = (
    "https://files.pythonhosted.org/packages/6c/b1/"
    "b77625e3d11260d2bd6a4fc249a4be9a3da97ff848e2222e810c4f0e0211/"
    "flash_attn-2.8.3.post2.tar.gz",
    "d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b")

NVCC = os.environ.get("KVATTN_NVCC", "/usr/local/cuda/bin/nvcc")
PTXAS = os.environ.get("KVATTN_PTXAS", "/usr/local/cuda/bin/ptxas")


def log(msg):
    print("[peers] " + msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    kw.setdefault("check", True)
    return subprocess.run(cmd, **kw)


class Cache:
    def __init__(self, root, verbose=False):
        self.root = os.path.abspath(root)
        self.dl = os.path.join(self.root, "dl")
        os.makedirs(self.dl, exist_ok=True)
        self.verbose = verbose

    def path(self, *p):
        return os.path.join(self.root, *p)

    # ---- downloads -------------------------------------------------------
    def wheel(self, key):
        name, ver = PINS[key]
        stem = name.replace("-", "_") + "-" + ver + "-"
        for f in os.listdir(self.dl):
            if f.startswith(stem) and f.endswith(".whl"):
                return os.path.join(self.dl, f)
        log("pip download %s==%s" % (name, ver))
        run(["nice", "-n", "5", sys.executable, "-m", "pip", "download",
             "--no-deps", "--only-binary=:all:", "-q", "-d", self.dl,
             "%s==%s" % (name, ver)])
        return self.wheel(key)

    def flash_attn_sdist(self):
        url, sha = FLASH_ATTN_SDIST
        dst = os.path.join(self.dl, url.rsplit("/", 1)[1])
        if not os.path.exists(dst):
            log("download " + url)
            tmp = dst + ".part"
            urllib.request.urlretrieve(url, tmp)
            os.replace(tmp, dst)
        h = hashlib.sha256(open(dst, "rb").read()).hexdigest()
        if h != sha:
            raise SystemExit("error: %s: sha256 %s, expected %s" %
                             (dst, h, sha))
        return dst

    def extract(self, key, members=None, sub=None):
        """Extracts a wheel (or some members) under BUILD/peers/<sub>."""
        sub = sub or key
        out = self.path(sub)
        stamp = os.path.join(out, ".extracted")
        if not os.path.exists(stamp):
            whl = self.wheel(key)
            log("extract " + os.path.basename(whl))
            z = zipfile.ZipFile(whl)
            names = z.namelist()
            if members:
                names = [n for n in names
                         if any(re.search(m, n) for m in members)]
            z.extractall(out, names)
            open(stamp, "w").close()
        return out

    # ---- tools -----------------------------------------------------------
    def tool(self, name):
        d = self.extract(name, sub="tools-" + name)
        p = os.path.join(d, "nvidia", "cu13", "bin", name)
        os.chmod(p, 0o755)
        return p

    # ---- FlashAttention-2: the sdist's csrc/ compiled with nvcc ----------
    def fa2_src(self):
        d = self.path("fa2")
        src = os.path.join(d, "flash_attn-2.8.3.post2")
        if not os.path.exists(os.path.join(src, ".extracted")):
            import tarfile
            sd = self.flash_attn_sdist()
            log("extract " + os.path.basename(sd))
            with tarfile.open(sd) as t:
                members = [m for m in t.getmembers()
                           if "/csrc/flash_attn/" in m.name
                           or "/csrc/cutlass/include/" in m.name]
                t.extractall(d, members)
            open(os.path.join(src, ".extracted"), "w").close()
        # Our own minimal stand-ins for the three PyTorch headers that the
        # forward kernels include (only types and no-op checks).
        stub = os.path.join(d, "stubs")
        files = {
            "c10/cuda/CUDAException.h":
                "#pragma once\n#define C10_CUDA_CHECK(x) (void)(x)\n"
                "#define C10_CUDA_KERNEL_LAUNCH_CHECK() do {} while (0)\n",
            "ATen/cuda/CUDAGeneratorImpl.h":
                "#pragma once\n#include <cstdint>\nnamespace at {\n"
                "struct PhiloxCudaState {\n"
                "  uint64_t seed_ = 0, offset_ = 0;\n"
                "  uint64_t *seed_ptr_ = nullptr, *offset_ptr_ = nullptr;\n"
                "  bool captured_ = false;\n};\n}\n",
            "ATen/cuda/detail/UnpackRaw.cuh":
                "#pragma once\n#include <tuple>\n"
                "#include <ATen/cuda/CUDAGeneratorImpl.h>\n"
                "namespace at { namespace cuda { namespace philox {\n"
                "__host__ __device__ inline std::tuple<uint64_t, uint64_t>\n"
                "unpack(PhiloxCudaState a) { return {a.seed_, a.offset_}; }\n"
                "}}}\n",
        }
        for rel, text in files.items():
            p = os.path.join(stub, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            if not os.path.exists(p) or open(p).read() != text:
                open(p, "w").write(text)
        return src, stub

    def fa2_cubin(self, name, kernel_expr, arch):
        """Compiles one FA2 kernel instantiation (taking its address forces
        it) for one arch; returns the cubin path."""
        out = self.path("fa2", "%s.%s.cubin" % (name, arch))
        if os.path.exists(out):
            return out
        src, stub = self.fa2_src()
        cu = self.path("fa2", name + ".cu")
        text = ('#include "flash_fwd_launch_template.h"\n'
                "namespace FLASH_NAMESPACE {\n"
                "void *kvattn_peer_kernel_%s() { return (void *)&%s; }\n"
                "}\n" % (name.replace("-", "_"), kernel_expr))
        open(cu, "w").write(text)
        flags = ["-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__",
                 "-U__CUDA_NO_HALF_CONVERSIONS__",
                 "-U__CUDA_NO_HALF2_OPERATORS__",
                 "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
                 "--expt-relaxed-constexpr", "--expt-extended-lambda",
                 "--use_fast_math"]
        inc = ["-I" + os.path.join(src, "csrc", "flash_attn"),
               "-I" + os.path.join(src, "csrc", "flash_attn", "src"),
               "-I" + os.path.join(src, "csrc", "cutlass", "include"),
               "-I" + stub]
        log("nvcc %s for %s (about a minute)" % (name, arch))
        tmp = out + ".part"
        run(["nice", "-n", "10", NVCC, "-cubin", "-arch=" + arch] + flags + inc
            + [cu, "-o", tmp])
        os.replace(tmp, out)
        return out

    # ---- SASS and resource usage of a cubin (cached) ----------------------
    def sass(self, cubin, function=None):
        tag = hashlib.sha256(function.encode()).hexdigest()[:12] \
            if function else "all"
        out = "%s.%s.sass" % (cubin, tag)
        if not os.path.exists(out) or \
                os.path.getmtime(out) < os.path.getmtime(cubin):
            env = dict(os.environ, NVDISASM_PATH=os.path.dirname(
                self.tool("nvdisasm")))
            cmd = [self.tool("cuobjdump"), "-sass"]
            if function:
                cmd += ["-fun", function]
            r = run(cmd + [cubin], env=env, capture_output=True, text=True)
            open(out + ".part", "w").write(r.stdout)
            os.replace(out + ".part", out)
        return open(out).read()

    def res_usage(self, cubin):
        """{function: dict(REG=, SHARED=, STACK=, LOCAL=)}"""
        txt = cubin + ".res"
        if not os.path.exists(txt) or \
                os.path.getmtime(txt) < os.path.getmtime(cubin):
            r = run([self.tool("cuobjdump"), "-res-usage", cubin],
                    capture_output=True, text=True)
            open(txt + ".part", "w").write(r.stdout)
            os.replace(txt + ".part", txt)
        out = {}
        for m in re.finditer(r"Function (\S+):\n\s+(.*)", open(txt).read()):
            out[m.group(1)] = {k: int(v) for k, v in
                               re.findall(r"(\w+):(\d+)", m.group(2))}
        return out

    # ---- sgl-kernel's compiled sm_90a kernels (FlashAttention-3, FlashMLA) --
    def sgl_cubin(self, library, pattern, what, sub=None, index_name=None,
                  keep=lambda mangled: True):
        """The sm_90a cubin of sgl-kernel's `library` (e.g. flash_ops)
        holding the kernel whose demangled name matches `pattern` (a regex);
        returns (cubin, mangled name).  The library's sm_90a functions that
        `keep` accepts are indexed once (index_name, in the extraction
        directory); `what` names the kernels in errors."""
        d = self.extract("sgl-kernel",
                         [r"sgl_kernel/%s\.abi3\.so$" % re.escape(library)],
                         sub=sub)
        so = os.path.join(d, "sgl_kernel", "%s.abi3.so" % library)
        index = os.path.join(d, index_name or "%s-kernels.txt" % library)
        if not os.path.exists(index):
            log("index the sm_90a kernels of sgl-kernel's %s.abi3.so" %
                library)
            r = run([self.tool("cuobjdump"), "-res-usage", so],
                    capture_output=True, text=True)
            rows = []
            for n, block in enumerate(r.stdout.split("Fatbin elf code:")[1:]):
                arch = re.search(r"arch = (\S+)", block).group(1)
                for m in re.finditer(r"Function (\S+):", block):
                    if arch == "sm_90a" and keep(m.group(1)):
                        rows.append((n + 1, m.group(1)))
            dem = run(["c++filt"], input="\n".join(r[1] for r in rows),
                      capture_output=True, text=True).stdout.splitlines()
            with open(index + ".part", "w") as f:
                for (n, name), pretty in zip(rows, dem):
                    f.write("%d\t%s\t%s\n" % (n, name, pretty))
            os.replace(index + ".part", index)
        hits = []
        for line in open(index):
            n, name, pretty = line.rstrip("\n").split("\t")
            # (One kernel may sit in two of the library's cubins: the first.)
            if re.search(pattern, pretty) and name not in (h[1] for h in hits):
                hits.append((int(n), name))
        if len(hits) != 1:
            raise SystemExit("error: %d sgl-kernel %s kernels match %r" %
                             (len(hits), what, pattern))
        n, name = hits[0]
        cubin = os.path.join(d, "%s.abi3.%d.sm_90a.cubin" % (library, n))
        if not os.path.exists(cubin):
            run([self.tool("cuobjdump"), "-xelf", os.path.basename(cubin),
                 so], cwd=d, capture_output=True)
        return cubin, name

    def fa3_cubin(self, pattern):
        """FlashAttention-3's forward kernels in sgl-kernel's flash_ops."""
        return self.sgl_cubin("flash_ops", pattern, "FA3",
                              index_name="fwd-kernels.txt",
                              keep=lambda m: "FlashAttnFwdSm90" in m)

    def flashmla_cubin(self, pattern):
        """FlashMLA's kernels in sgl-kernel's flashmla_ops, which bundles
        them (csrc/sm90/decode/dense/splitkv_mla.cu for the bf16 decode)
        for sm_90a and sm_100a."""
        return self.sgl_cubin("flashmla_ops", pattern, "FlashMLA",
                              sub="flashmla", index_name="kernels.txt")

    # ---- FlashInfer: its headers (flashinfer-python) compiled with nvcc ---
    def flashinfer_cubin(self, name, source, arch, cutlass=False):
        """cutlass: the kernel includes its bundled CUTLASS/CuTe too (the
        Hopper kernels: wgmma descriptors, TMA, pipelines)."""
        out = self.path("flashinfer", "%s.%s.cubin" % (name, arch))
        if os.path.exists(out):
            return out
        d = self.extract("flashinfer-python",
                         [r"^flashinfer/data/include/",
                          r"^flashinfer/data/cccl/(libcudacxx/include|cub/cub|"
                          r"thrust/thrust)/"], sub="flashinfer")
        data = os.path.join(d, "flashinfer", "data")
        # FlashInfer's JIT puts its bundled CCCL first (cuda::fast_mod_div
        # is newer than CUDA 13.0's).
        incs = ["-I" + os.path.join(data, p) for p in (
            "cccl/libcudacxx/include", "cccl/cub", "cccl/thrust", "include")]
        if cutlass:
            c = self.extract("flashinfer-python",
                             [r"^flashinfer/data/cutlass/include/"],
                             sub="flashinfer-cutlass")
            incs.append("-I" + os.path.join(c, "flashinfer", "data",
                                            "cutlass", "include"))
        cu = self.path("flashinfer", name + ".cu")
        open(cu, "w").write(source)
        log("nvcc FlashInfer %s for %s" % (name, arch))
        tmp = out + ".part"
        run(["nice", "-n", "10", NVCC, "-cubin", "-arch=" + arch, "-O3",
             "-std=c++17", "--expt-relaxed-constexpr", "--use_fast_math",
             "-DNDEBUG", "-DFLASHINFER_ENABLE_BF16"] + incs + [cu, "-o", tmp])
        os.replace(tmp, out)
        return out

    # ---- SGLang's Triton kernels, compiled ahead of time ------------------
    def triton_cubin(self, kernel, cc, d):
        out = self.path("triton", "%s-hd%d.sm_%d" % (kernel, d, cc))
        if os.path.exists(out + ".cubin"):
            return out + ".cubin", out + ".json"
        tdir = self.path("triton-" + PINS["triton"][1])
        if not os.path.exists(os.path.join(tdir, ".installed")):
            log("pip install --target %s triton==%s" % (tdir,
                                                        PINS["triton"][1]))
            run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                 "--target", tdir, self.wheel("triton")])
            open(os.path.join(tdir, ".installed"), "w").close()
        sgl = self.extract("sglang", [
            r"^sglang/kernels/ops/attention/(decode|extend)_attention\.py$"])
        os.makedirs(self.path("triton"), exist_ok=True)
        log("triton.compile SGLang %s hd%d for sm_%d" % (kernel, d, cc))
        env = dict(os.environ, PYTHONPATH=tdir,
                   TRITON_CACHE_DIR=self.path("triton", "cache"))
        run(["nice", "-n", "10", sys.executable,
             os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "triton_aot.py"), sgl, kernel, str(cc), out,
             str(d)], env=env)
        return out + ".cubin", out + ".json"


def kvattn_cubin(cache, build, case_flags, chip, tag, num_sms=None):
    """kvattn's kernels for one shape: attention_case.py -> IR,
    kvattn-compile --chip [--num-sms] -> PTX + manifest, ptxas -> cubin.
    Rebuilt every run (a few seconds) so a kernel change shows at once.
    num_sms: the modelled GPU's multiprocessors, which a serving engine's
    plan passes (the split-KV rule's), as the peers' splits use them."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    case = os.path.join(root, "test", "Numerics", "Inputs",
                        "attention_case.py")
    d = cache.path("kvattn")
    os.makedirs(d, exist_ok=True)
    ir = os.path.join(d, tag + ".mlir")
    r = run([sys.executable, case, "--dtype", "bf16", "--Hq", "32", "--Hkv",
             "8", "--causal", "--ir-only"] + case_flags.split(),
            capture_output=True, text=True)
    open(ir, "w").write(r.stdout)
    comp = os.path.join(build, "bin", "kvattn-compile")
    if not os.path.exists(comp):
        raise SystemExit("error: %s not found (build kvattn first, or pass "
                         "--build DIR)" % comp)
    base = os.path.join(d, "%s.%s" % (tag, chip))
    # Recompiled when the IR, the chip or the kvattn-compile binary changed.
    st = os.stat(comp)
    sms = ["--num-sms=%d" % num_sms] if num_sms else []
    key = hashlib.sha256(("%s|%s|%s|%d|%d" % (
        r.stdout, chip, " ".join(sms), st.st_mtime_ns,
        st.st_size)).encode()).hexdigest()
    stamp = base + ".key"
    if not (os.path.exists(stamp) and open(stamp).read() == key and
            os.path.exists(base + ".cubin")):
        r = run([comp, ir, "-o", base, "--chip=" + chip] + sms,
                capture_output=True, text=True, check=False)
        if r.returncode:
            raise SystemExit("error: kvattn-compile failed:\n" + r.stderr)
        r = run([PTXAS, "-arch=" + chip, base + ".ptx", "-o",
                 base + ".cubin"], capture_output=True, text=True,
                check=False)
        if r.returncode:
            raise SystemExit("error: ptxas failed:\n" + r.stderr)
        open(stamp, "w").write(key)
    import json
    manifest = json.load(open(base + ".json"))
    return base + ".cubin", manifest
