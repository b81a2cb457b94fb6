#!/usr/bin/env python3
"""One SASS analyser for kvattn's and the peers' kernels.

Reads `cuobjdump -sass` text, finds each function's main KV loop and counts
what one warp issues in one trip through it (docs/benchmarks.md, "Peers at
the SASS level"):

- the control-flow graph of the function (branch targets, fall-throughs,
  EXIT/RET), its natural loops (a branch to an address at or before it is a
  back edge; the loop is its target plus every block that reaches the branch
  without passing the target; loops with one header are merged);
- the main loop: among the innermost loops that hold tensor-core
  instructions (HMMA/HGMMA), the one with the most tensor FLOPs, ties to the
  fewest instructions (FlashAttention's causal kernels have a masked loop and
  a steady-state loop with the same MMAs: the steady-state one is shorter);
  without tensor instructions (CUDA-core decode kernels) the innermost loop
  with the most floating-point work;
- per trip, per warp: instructions by class, tensor FLOPs, shared-memory bytes
  (ldmatrix .xN = N x 128 B, LDS/STS width x 32 lanes), cp.async / TMA,
  barriers, MUFU, spills.  A loop nested in the main loop (a spin wait) is
  counted once; a rolled copy loop by its trips, each in its steady state
  (steady_state: a cold branch, such as the FP8 decode's NaN fix-up, is
  left out, as in the main loop).

    python3 bench/peers/sass.py FILE.sass [--function SUBSTRING] [--json]
"""

import argparse
import json
import re

INSTR = re.compile(
    r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?"
    r"([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*([^;]*);")
FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")

# The unit of work: 16 query rows x 64 keys x D 128, both GEMMs
# (QK^T and PV): 2 x 2 x 16 x 64 x 128 FLOP = 128 mma.sync m16n8k16.
UNIT_FLOPS = 2 * 2 * 16 * 64 * 128

INT_OPS = {"IMAD", "IADD3", "IADD", "IADD32I", "LOP3", "LOP", "LOP32I", "SHF",
           "SHL", "SHR", "LEA", "ISETP", "IMNMX", "IABS", "POPC", "FLO", "BFI",
           "BFE", "SGXT", "PRMT", "IMUL", "IMAD32I", "ISCADD", "BMSK", "BREV",
           "IDP", "IMNMX", "VIADD", "VIMNMX", "VIADDMNMX", "UIADD3", "ULOP3",
           "UIMAD", "USHF", "ULEA", "UISETP", "USEL", "UPRMT", "ULOP",
           "UIADD3", "USGXT", "UBMSK", "UFLO", "UPOPC", "UIMNMX", "ULOP32I",
           "UIMAD32I", "UBREV", "UVIADD"}
MOVE_OPS = {"MOV", "MOV32I", "UMOV", "S2R", "S2UR", "CS2R", "R2UR", "R2P",
            "P2R", "ULDC", "LDC", "SEL", "UP2UR", "UR2UP", "PLOP3", "UPLOP3",
            "VOTE", "VOTEU", "ELECT", "REDUX", "UCGABAR_ARV", "UCGABAR_WAIT",
            "FSEL", "LDCU"}
FP_OTHER = {"FMNMX", "FSETP", "FSET", "FCHK", "FSWZADD", "FRND", "FMNMX3",
            "FADD32I", "FMUL32I", "FFMA32I", "DFMA", "DADD", "DMUL", "HADD2",
            "HMUL2", "HFMA2", "HMNMX2", "HSETP2", "FMUL2", "FADD2", "FFMA2"}
CVT_OPS = {"F2F", "F2FP", "F2I", "I2F", "I2FP", "F2IP", "I2I", "I2IP"}
CONTROL = {"BRA", "BRX", "JMP", "JMX", "BSSY", "BSYNC", "EXIT", "RET", "CALL",
           "NOP", "YIELD", "BREAK", "BPT", "KILL", "WARPSYNC", "NANOSLEEP",
           "ACQBULK", "BMOV", "ACQSHMINIT"}
SYNC_OPS = {"WARPGROUP", "DEPBAR", "MEMBAR", "FENCE", "ERRBAR", "CCTL",
            "WARPGROUPSET", "SETMAXNREG", "USETMAXREG"}
TMA_OPS = {"UTMALDG", "UTMASTG", "UBLKCP", "UTMAPF", "UTMACCTL", "UBLKRED",
           "UTMAREDG", "UBLKPF"}

WIDTH = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16, "32": 4}


class Instr:
    __slots__ = ("addr", "pred", "op", "args", "base", "mods")

    def __init__(self, addr, pred, op, args):
        self.addr, self.pred, self.op, self.args = addr, pred, op, args.strip()
        parts = op.split(".")
        self.base, self.mods = parts[0], parts[1:]

    def target(self):
        m = re.search(r"(?:^|[\s,`(])(?:0x)?([0-9a-f]+)\)?\s*$", self.args)
        if self.base in ("BRA", "JMP", "CALL") and m:
            # cuobjdump prints absolute targets (BRA 0x1f0 / `(.L_x_3)
            # without labels).
            return int(m.group(1), 16)
        return None


def parse(text):
    """{function name: [Instr]} from cuobjdump -sass (or compatible) text."""
    funcs, cur = {}, None
    for line in text.splitlines():
        m = FUNC.match(line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        m = INSTR.search(line)
        if m and cur is not None:
            pred = (m.group(2) or "").strip() or None
            cur.append(Instr(int(m.group(1), 16), pred, m.group(3),
                             m.group(4)))
    return funcs


# --- Control flow ------------------------------------------------------------
def blocks_of(ins):
    """Basic blocks as [start, end) index ranges and their successors."""
    if not ins:
        return [], {}
    index = {i.addr: k for k, i in enumerate(ins)}
    leaders = {0}
    for k, i in enumerate(ins):
        t = i.target()
        if t is not None and t in index:
            leaders.add(index[t])
        if i.base in ("BRA", "JMP", "BRX", "JMX", "EXIT", "RET", "CALL",
                      "KILL"):
            if k + 1 < len(ins):
                leaders.add(k + 1)
    starts = sorted(leaders)
    bounds = [(s, starts[n + 1] if n + 1 < len(starts) else len(ins))
              for n, s in enumerate(starts)]
    block_of = {s: n for n, (s, _) in enumerate(bounds)}
    succ = {}
    for n, (s, e) in enumerate(bounds):
        last = ins[e - 1]
        out = set()
        t = last.target()
        if t is not None and t in index and last.base in ("BRA", "JMP"):
            out.add(block_of[index[t]])
        ends = last.base in ("BRA", "JMP", "EXIT", "RET", "KILL") and \
            last.pred is None
        if last.base in ("BRX", "JMX"):
            ends = False
        if not ends and n + 1 < len(bounds):
            out.add(n + 1)
        succ[n] = out
    return bounds, succ


def loops_of(ins):
    """Natural loops: {header block: set of blocks}, merged per header."""
    bounds, succ = blocks_of(ins)
    pred = {n: set() for n in succ}
    for n, out in succ.items():
        for m in out:
            pred[m].add(n)
    loops = {}
    for n, out in succ.items():
        for h in out:
            if h <= n:  # a retreating edge in address order
                body = {h, n}
                work = [n] if n != h else []
                while work:
                    b = work.pop()
                    for p in pred[b]:
                        if p not in body:
                            body.add(p)
                            work.append(p)
                loops.setdefault(h, set()).update(body)
    return bounds, loops


# --- Counting ----------------------------------------------------------------
def mma_flops(i):
    """Tensor FLOPs one warp's instruction stands for."""
    if i.base == "HMMA":
        for m in i.mods:
            shape = {"16816": (16, 8, 16), "1688": (16, 8, 8),
                     "884": (8, 8, 4), "16832": (16, 8, 32)}.get(m)
            if shape:
                return 2 * shape[0] * shape[1] * shape[2]
        return 2 * 16 * 8 * 16
    if i.base in ("HGMMA", "QGMMA", "IGMMA"):
        for m in i.mods:
            g = re.match(r"(\d+)x(\d+)x(\d+)$", m)
            if g:
                mm, nn, kk = map(int, g.groups())
                return 2 * mm * nn * kk // 4  # a warpgroup of 4 warps
    return 0


def wgmma_smem_bytes(i):
    """Shared-memory bytes one warp's share of a warpgroup MMA reads: the B
    operand (always a descriptor) and the A operand when it is one too (SS;
    RS takes A from registers), each once per warpgroup instruction (B is
    broadcast to the four warps' tensor cores), a quarter per warp.  An
    m64n32k16 SS wgmma reads 3 KB in the 16 cycles its 65,536 FLOP take at
    4,096 FLOP/cycle: 192 B/cycle, above shared memory's 128."""
    if i.base not in ("HGMMA", "QGMMA", "IGMMA"):
        return 0
    shape = next((re.match(r"(\d+)x(\d+)x(\d+)$", m) for m in i.mods
                  if re.match(r"(\d+)x(\d+)x(\d+)$", m)), None)
    if not shape:
        return 0
    mm, nn, kk = map(int, shape.groups())
    # Operand element bytes: 1 for FP8 and integer MMAs, 4 for TF32, 2 for
    # F16/BF16.
    elt = 1 if i.base in ("QGMMA", "IGMMA") else (
        4 if "TF32" in i.mods else 2)
    operands = [a.strip() for a in i.args.split(",")]
    a_smem = len(operands) > 1 and operands[1].startswith("gdesc")
    return ((mm * kk * elt if a_smem else 0) + nn * kk * elt) // 4


def access_bytes(i, default=4):
    for m in i.mods:
        if m in WIDTH:
            return WIDTH[m] * 32
    return default * 32


def count(ins):
    """Counts of one warp executing the instructions once."""
    c = {k: 0 for k in (
        "insts", "hmma", "hgmma", "mma_flops", "mma_flops_fp8", "ldsm", "lds",
        "sts", "smem_bytes", "wgmma_smem_bytes", "ldgsts", "ldgsts_bytes",
        "tma", "ldg", "stg",
        "gmem_bytes", "bar", "named_bar", "mbar", "sync", "mufu", "ex2",
        "ffma", "fmul", "fadd", "fp_other", "cvt", "int", "move", "shfl",
        "spill", "spill_bytes", "control", "other")}
    shapes, wgmma_ops = {}, {}
    for i in ins:
        b = i.base
        c["insts"] += 1
        f = mma_flops(i)
        if f:
            c["mma_flops"] += f
            if b == "QGMMA":  # FP8 operands: twice the BF16 rate
                c["mma_flops_fp8"] += f
            key = "hgmma" if b != "HMMA" else "hmma"
            c[key] += 1
            smem = wgmma_smem_bytes(i)
            c["wgmma_smem_bytes"] += smem
            if b != "HMMA":
                # The model's per-instruction tensor time: the larger of its
                # math (BF16-equivalent FLOPs: an FP8 one costs half) and
                # its operand reads (model.per_iter_demands).
                key = "%d:%d" % (f // 2 if b == "QGMMA" else f, smem)
                wgmma_ops[key] = wgmma_ops.get(key, 0) + 1
            shape = next((m for m in i.mods if re.match(r"\d", m)), "?")
            shapes[b + "." + shape] = shapes.get(b + "." + shape, 0) + 1
        elif b == "LDSM":
            n = i.mods[-1] if i.mods and i.mods[-1] in ("2", "4") else "1"
            c["ldsm"] += 1
            c["smem_bytes"] += 128 * int(n)
        elif b in ("LDS", "STS", "LDSU"):
            key = "lds" if b != "STS" else "sts"
            c[key] += 1
            c["smem_bytes"] += access_bytes(i)
        elif b == "LDGSTS":
            c["ldgsts"] += 1
            c["ldgsts_bytes"] += access_bytes(i)
        elif b in TMA_OPS:
            c["tma"] += 1
        elif b in ("LDG", "LD"):
            c["ldg"] += 1
            c["gmem_bytes"] += access_bytes(i)
        elif b in ("STG", "ST", "RED", "ATOMG", "ATOM"):
            c["stg"] += 1
            c["gmem_bytes"] += access_bytes(i)
        elif b in ("LDL", "STL"):
            c["spill"] += 1
            c["spill_bytes"] += access_bytes(i)
        elif b == "BAR":
            c["bar"] += 1
            first = i.args.split(",")[0].strip()
            if first not in ("", "0x0") or "," in i.args:
                c["named_bar"] += 1
        elif b == "SYNCS":
            c["mbar"] += 1
        elif b in SYNC_OPS:
            c["sync"] += 1
        elif b == "MUFU":
            c["mufu"] += 1
            if "EX2" in i.mods:
                c["ex2"] += 1
        elif b == "FFMA":
            c["ffma"] += 1
        elif b == "FMUL":
            c["fmul"] += 1
        elif b == "FADD":
            c["fadd"] += 1
        elif b in FP_OTHER:
            c["fp_other"] += 1
        elif b in CVT_OPS:
            c["cvt"] += 1
        elif b == "IMAD" and i.mods[:1] == ["MOV"]:
            c["move"] += 1
        elif b in INT_OPS:
            c["int"] += 1
        elif b in MOVE_OPS:
            c["move"] += 1
        elif b == "SHFL":
            c["shfl"] += 1
        elif b in CONTROL:
            c["control"] += 1
        else:
            c["other"] += 1
    c["shapes"] = shapes
    c["wgmma_ops"] = wgmma_ops
    return c


# --- Warpgroup roles ---------------------------------------------------------
def writes_predicate(i, p):
    """Whether `i` writes predicate register `p` (one of its destinations:
    its leading operands; R2P writes them all)."""
    if i.base in ("BRA", "JMP"):
        return False
    dests = [a.strip() for a in i.args.split(",")[:2]]
    return p in dests or (i.base == "R2P" and "PR" in dests)


def predicate_test(i):
    """(destination, (register, mask)) when `i` sets a predicate from a
    general register alone: `LOP3.LUT P, RZ, R, imm, RZ, 0xc0, !PT`
    (R & imm != 0) or `ISETP.NE(.U32).AND P, PT, R, RZ, PT` (R != 0, mask
    None); else None."""
    a = [x.strip() for x in i.args.split(",")]
    if i.pred:
        return None
    if i.base == "LOP3" and len(a) == 7 and a[1] == "RZ" and a[3].startswith(
            "0x") and a[4] == "RZ" and a[5] == "0xc0" and a[6] == "!PT":
        return a[0], (a[2].split(".")[0], int(a[3], 16))
    if i.base == "ISETP" and i.mods[:1] == ["NE"] and i.mods[-1] == "AND" \
            and len(a) == 5 and a[1] == "PT" and a[3] == "RZ" and a[4] == "PT":
        return a[0], (a[2].split(".")[0], None)
    return None


def writes_register(i, r):
    """Whether `i` writes general register `r` (its first operand; a 64-bit
    or wider destination writes the registers after it too, which this
    does not see: used only for registers a role test reads)."""
    return i.base not in ("BRA", "JMP", "STS", "STG", "ST", "STL", "RED",
                          "ATOM", "ATOMS", "SYNCS", "BAR") and \
        i.args.split(",")[0].strip().split(".")[0] == r


def role_branches(body, before=()):
    """The forward branches that divide a loop's warps into two roles, as
    {address: whether the role that runs Q.K^T takes it}, and the
    instructions predicated by the same value, as {address: whether that
    role skips it}; or None. The branches are those on
    the value of the predicate of a branch skipping tensor instructions
    (HGMMA), where that value is the same in every trip (kvattn's latent
    wgmma kernel: the score warpgroup runs Q.K^T, the mask and the softmax;
    the other skips them and takes the probabilities from shared memory).
    The value is the predicate as the code before the loop (`before`, in
    address order) left it, or a test of a general register the loop never
    writes (the warpgroup's index: `LOP3.LUT P, RZ, R, 1, ...`), which ptxas
    may repeat in the loop after reusing the predicate, or have made into
    other predicates before it (all of them hold the role); it may also keep
    it in a general register meanwhile (P2R R, PR, RZ, bit; later ISETP.NE
    P, R, RZ). `body` in address order."""
    last = body[-1].addr
    first = None
    for k, i in enumerate(body):
        t = i.target()
        if i.base == "BRA" and i.pred and t is not None and \
                i.addr < t <= last and any(
                    j.base == "HGMMA" for j in body[k + 1:] if j.addr < t):
            first = (k, i.pred.lstrip("@!"))
            break
    if first is None:
        return None
    k0, p0 = first
    # The value's definition: the last write of p0 before the branch, in
    # the loop or else before it.
    inside = [j for j in body[:k0] if writes_predicate(j, p0)]
    outside = [j for j in before if writes_predicate(j, p0)]
    definition = inside[-1] if inside else (outside[-1] if outside else None)
    test = predicate_test(definition) if definition is not None else None
    signature = test[1] if test and test[0] == p0 else None
    if signature and any(writes_register(j, signature[0]) for j in body):
        signature = None  # the tested register changes: not a role
    if inside and signature is None:
        return None  # computed in the loop from what may change
    # Where the role's value lives: predicates (True) or the general
    # registers P2R copied it into (the register holds that bit only).
    holds = {} if inside else {p0: True}
    if signature:  # other predicates the code before the loop set alike
        for n in range(7):
            q = "P%d" % n
            defs = [j for j in before if writes_predicate(j, q)]
            test = predicate_test(defs[-1]) if defs else None
            if test and test[0] == q and test[1] == signature:
                holds[q] = True
    bit = {"P%d" % n: 1 << n for n in range(7)}
    negated0 = body[k0].pred.lstrip("@").startswith("!")
    out = {}
    for i in body:
        if i.pred and holds.get(i.pred.lstrip("@!")) is True:
            # The Q.K^T role does not take the branch that skips Q.K^T: it
            # takes one of the other polarity, and runs an instruction
            # predicated so (if-converted code) only then.
            negated = i.pred.lstrip("@").startswith("!")
            t = i.target()
            if i.base != "BRA":
                out[i.addr] = negated == negated0
            elif t is not None and t > i.addr:
                out[i.addr] = negated != negated0
            if i.base == "BRA":
                continue
        args = [a.strip() for a in i.args.split(",")]
        test = predicate_test(i)
        if test and signature and test[1] == signature:
            holds[test[0]] = True
            continue
        if i.base == "P2R" and len(args) >= 4 and args[1] == "PR":
            mask = int(args[3], 0) if re.match(r"^(0x[0-9a-f]+|\d+)$",
                                               args[3]) else 0
            held = [q for q, v in holds.items() if v is True]
            holds.pop(args[0], None)
            if len(held) == 1 and mask == bit.get(held[0]) and \
                    args[2] == "RZ":
                holds[args[0]] = "bits"
            continue
        if test and test[1][1] is None and holds.get(test[1][0]) == "bits":
            holds[test[0]] = True
            continue
        for d in args[:2]:
            holds.pop(d.split(".")[0], None)
        if i.base == "R2P":
            for q in list(holds):
                if q.startswith("P"):
                    holds.pop(q)
    return out


def role_body(body, branches, scoring):
    """What the warps of one role run of `body` (`scoring`: the role that
    runs Q.K^T): a role branch (role_branches) they take skips its region,
    a role-predicated instruction they skip is left out."""
    skip = set()
    for k, i in enumerate(body):
        if i.addr not in branches or branches[i.addr] != scoring:
            continue
        if i.base == "BRA":
            skip.update(j.addr for j in body[k + 1:] if j.addr < i.target())
        else:
            skip.add(i.addr)
    return [i for i in body if i.addr not in skip]


def mean_of(counts):
    """The mean of per-warp counts (dictionaries entry by entry): the warps
    of two roles, in equal numbers."""
    out = dict(counts[0])
    for k, v in counts[0].items():
        if isinstance(v, (int, float)):
            out[k] = sum(c[k] for c in counts) / len(counts)
        elif isinstance(v, dict):
            keys = set().union(*(c[k] for c in counts))
            out[k] = {s: sum(c[k].get(s, 0) for c in counts) / len(counts)
                      for s in keys}
    return out


def main_loop(ins, which=None, expect=None):
    """(first address, last address, [(instructions, trips)]) of the main
    KV loop: its own steady-state instructions once, and those of a nested
    loop with tensor work as many times as the expected work needs.

    which: None for the rule above; an index into the candidate loops in
    address order (SGLang's extend kernel has a prefix loop and an extend
    loop: 0 and -1).
    expect: the tensor FLOPs one warp does per KV block (from the tile).
    With it, a loop qualifies when its own tensor work plus t >= 1 trips of
    the tensor loops nested in it (or its own work alone, if none) give
    the expected work (up to 10 % more, see below): ptxas for sm_90 keeps part of kvattn's block
    (a PV chunk loop) as an inner loop, and FlashAttention-3's persistent
    tile loop, which holds the KV loop, never qualifies."""
    bounds, loops = loops_of(ins)
    if not loops:
        return None
    cands = []
    for h, body in loops.items():
        body_ins = [ins[k] for b in sorted(body)
                    for k in range(*bounds[b])]
        cands.append((h, body, body_ins))

    def work(c):
        cc = count(c[2])
        return cc["mma_flops"], cc["ffma"] + cc["fmul"] + cc["fadd"]

    tensor = [c for c in cands if work(c)[0] > 0]
    pool = tensor or [c for c in cands if work(c)[1] > 0] or cands
    key = 0 if tensor else 1
    nested_of = {id(c): [o for o in tensor if o is not c and o[1] < c[1]]
                 for c in pool}
    trips, roles = {}, {}
    if expect and tensor:
        valid = []
        for c in pool:
            # The tensor loops directly inside c (not inside another one).
            inner = [o for o in nested_of[id(c)]
                     if not any(p is not o and o[1] < p[1]
                                for p in nested_of[id(c)])]
            inner_body = set().union(*(o[1] for o in inner)) if inner \
                else set()
            own = sum(mma_flops(ins[k]) for b in c[1] - inner_body
                      for k in range(*bounds[b]))
            nest = sum(work(o)[0] for o in inner)
            # Up to 10 % more tensor work than the tile needs is accepted:
            # FlashInfer sums the probabilities' rows with an mma against
            # ones (8 more m16n8k16 per 256).
            if not inner and expect <= own <= 1.1 * expect:
                valid.append(c)
                trips[id(c)] = []
            elif inner and own < expect and (expect - own) % nest == 0:
                valid.append(c)
                trips[id(c)] = [(o, (expect - own) // nest) for o in inner]
            elif not inner:
                # Two roles (role_branches): the tile's work is their mean.
                c_ins = sorted(c[2], key=lambda i: i.addr)
                p = role_branches(c_ins, [i for i in ins
                                          if i.addr < c_ins[0].addr])
                if p:
                    mean = sum(sum(mma_flops(i) for i in role_body(
                        c_ins, p, v)) for v in (False, True)) / 2
                    if expect <= mean <= 1.1 * expect:
                        valid.append(c)
                        trips[id(c)] = []
                        roles[id(c)] = p
        if not valid:
            raise SystemExit(
                "sass.py: no loop does %d tensor FLOPs per warp per block "
                "(loops: %s)" % (expect, ", ".join(
                    "0x%x: %d" % (min(i.addr for i in c[2]), work(c)[0])
                    for c in tensor)))
        pool = [c for c in valid
                if not any(o is not c and o[1] < c[1] for o in valid)]
        inner = pool
    else:
        # Innermost: drop a loop that strictly contains another of the pool.
        inner = [c for c in pool
                 if not any(o is not c and o[1] < c[1] for o in pool)]
    if which is not None:
        inner.sort(key=lambda c: min(i.addr for i in c[2]))
        best = inner[which]
    else:
        best = max(inner, key=lambda c: (work(c)[key], -len(c[2])))
    body_ins = sorted(best[2], key=lambda i: i.addr)
    parts = []
    nested_addrs = set()
    for o, t in trips.get(id(best), []):
        o_ins = sorted(o[2], key=lambda i: i.addr)
        nested_addrs.update(i.addr for i in o_ins)
        parts.append((steady_state(o_ins), t))
    own = [i for i in body_ins if i.addr not in nested_addrs]
    role = roles.get(id(best))
    if role is None:
        firsts = [steady_state(own)]
    else:
        # Each role's own instructions, its role branches not optional.
        firsts = [steady_state(role_body(own, role, v), keep=role)
                  for v in (True, False)]
    # Loops nested in it without tensor work that move data (a copy loop
    # LLVM left rolled; not a spin wait on an mbarrier) count once per trip
    # of the main loop above; a counted loop (counted_trips) adds its other
    # trips here. One whose trips cannot be read stays counted once: the
    # counts are then a lower bound (`rolled_*`).
    rolled = [o for o in cands
              if o[1] < best[1] and work(o)[0] == 0 and any(
                  i.base in DATA_OPS and i.base != "SYNCS" for i in o[2])
              # (An ELECT loop runs once a warp: one elected lane's issue.)
              and not any(i.base == "ELECT" for i in o[2])]
    # Innermost first does not matter: these loops hold no tensor loop.
    untripped, extra = [], []
    for o in rolled:
        o_ins = sorted(o[2], key=lambda i: i.addr)
        t = counted_trips(o_ins)
        if t is None:
            untripped.append(o)
        elif t > 1:
            extra.append((steady_state(o_ins), t - 1))
    rolled_insts = len(set(i.addr for o in untripped for i in o[2]))
    return (body_ins[0].addr, body_ins[-1].addr,
            [[(first, 1)] + parts for first in firsts], extra,
            (len(untripped), rolled_insts), role)


DATA_OPS = {"HMMA", "HGMMA", "LDGSTS", "LDG", "STG", "UTMALDG", "UBLKCP",
            "LDSM", "SYNCS"}


def counted_trips(body):
    """The trips of a counted loop (`body` in address order, its back edge
    last): a counter register compared with an immediate bound by the
    ISETP that sets the back edge's predicate and stepped by an immediate
    add in the body, from a start below one step (a thread's first element
    of a cooperative loop, or 0). None when the loop is not of that form.
    """
    back = body[-1]
    if back.base != "BRA" or not back.pred:
        return None
    pred = back.pred.lstrip("@!")
    cmp = next((i for i in reversed(body[:-1]) if i.base == "ISETP" and
                i.args.split(",")[0].strip() == pred), None)
    if cmp is None:
        return None
    args = [a.strip() for a in cmp.args.split(",")]
    if len(args) < 4 or not re.match(r"^R\d+(\.reuse)?$", args[2]) or \
            not re.match(r"^(0x[0-9a-f]+|\d+)$", args[3]):
        return None
    reg, bound = args[2].split(".")[0], int(args[3], 0)
    # The step: an add of an immediate that writes the counter (from
    # itself, or from the register ptxas rotates it through), the carry
    # form (IADD3 R, P, R, imm) included.
    step, step_at = None, None
    for i in body:
        a = [x.strip() for x in i.args.split(",")]
        if i.base not in ("IADD3", "VIADD", "IADD") or len(a) < 3 or \
                a[0] != reg:
            continue
        srcs = a[2:] if re.match(r"^!?P\d$", a[1]) else a[1:]
        imm = [x for x in srcs[:2] if re.match(r"^(0x[0-9a-f]+|\d+)$", x)]
        if imm and re.match(r"^R\d+", srcs[0]):
            step, step_at = int(imm[0], 0), i.addr
    if not step or step <= 0 or bound <= 0:
        return None
    # The compare reads the counter before or after this trip's step.
    before = cmp.addr < step_at
    trips = bound // step + 1 if before else -(-bound // step)
    return trips if 1 <= trips <= 4096 else None


def steady_state(body, keep=()):
    """The loop body without its optional regions: a forward conditional
    branch that skips only instructions bringing no data and doing no tensor
    work (no HMMA/HGMMA, global loads or stores, cp.async, TMA, ldmatrix,
    mbarrier) jumps over masking or fix-up code that a full, unmasked KV
    block does not run (kvattn's causal mask of the shared score tile).
    Regions with such instructions (the next block's prefetch) stay, and
    so do those of the branches at the addresses in `keep` (role_branches:
    the work of one of the roles, not optional)."""
    addrs = [i.addr for i in body]
    skip = set()
    for k, i in enumerate(body):
        t = i.target()
        if i.base != "BRA" or i.pred is None or t is None or t <= i.addr \
                or t > addrs[-1] or i.addr in keep:
            continue
        region = [j for j in body[k + 1:] if j.addr < t]
        if region and not any(j.base in DATA_OPS for j in region):
            skip.update(j.addr for j in region)
    return [i for i in body if i.addr not in skip]


def analyse(ins, which=None, expect=None):
    """Counts per warp per trip of the main loop, plus where it is."""
    ml = main_loop(ins, which, expect)
    if ml is None:
        return None
    lo, hi, alternatives, extra, (rolled_loops, rolled_insts), role = ml
    per_role = []
    for parts in alternatives:
        c = None
        for body, trips in parts + extra:
            cc = count(body)
            if c is None:
                c = cc
                continue
            for k, v in cc.items():
                if isinstance(v, dict):  # shapes, wgmma_ops
                    for s, n in v.items():
                        c[k][s] = c[k].get(s, 0) + n * trips
                else:
                    c[k] += v * trips
        per_role.append(c)
    # Two roles: the mean of their warps (each role is half of them).
    c = mean_of(per_role) if len(per_role) > 1 else per_role[0]
    parts = alternatives[0]
    c["roles"] = len(per_role)
    c["nested_trips"] = sum(t for _, t in parts[1:])
    c["rolled_trips"] = sum(t for _, t in extra)
    c["rolled_loops"], c["rolled_insts"] = rolled_loops, rolled_insts
    c["loop"] = "0x%x-0x%x" % (lo, hi)
    c["kernel_insts"] = len(ins)
    return c


def pick(funcs, substring=None):
    names = [n for n in funcs if substring is None or substring in n]
    if not names:
        raise SystemExit("sass.py: no function matches %r (have: %s)" %
                         (substring, ", ".join(sorted(funcs))[:2000]))
    # The function with the most tensor work, then the longest.
    return max(names, key=lambda n: (sum(mma_flops(i) for i in funcs[n]),
                                     len(funcs[n])))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("file")
    p.add_argument("--function", help="a substring of the function's name")
    p.add_argument("--expect", type=int, help="the tensor FLOPs one warp "
                   "does per KV block (from the tile): selects the loop and "
                   "the trips of a nested tensor loop")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    with open(a.file) as f:
        funcs = parse(f.read())
    if not funcs:
        raise SystemExit("sass.py: %s: no SASS functions found" % a.file)
    name = pick(funcs, a.function)
    c = analyse(funcs[name], expect=a.expect)
    if c is None:
        raise SystemExit("sass.py: %s: no loop in %s" % (a.file, name))
    if a.json:
        print(json.dumps(dict(function=name, **c), sort_keys=True))
        return
    print("function %s" % name)
    print("loop %s" % c.pop("loop"))
    shapes, wgmma_ops = c.pop("shapes"), c.pop("wgmma_ops")
    # (Two roles' means may be halves.)
    def number(v):
        return "%d" % v if v == int(v) else "%g" % v

    for k in sorted(c):
        print("%s %s" % (k, number(c[k])))
    for k in sorted(shapes):
        print("shape %s %s" % (k, number(shapes[k])))
    # FLOPs (BF16 equivalents) and shared-memory operand bytes per warp.
    for k in sorted(wgmma_ops):
        print("wgmma_op %s %s" % (k, number(wgmma_ops[k])))


if __name__ == "__main__":
    main()
