"""Source generator of the TF32 tensor-core flash-attention kernels (fwd, fwdl, dq, dkv).

Used for float32 attention under TF32 precision (`default_matmul_precision="tensorfloat32"`,
as JAX's attention einsums follow it). Each warp owns 16 rows (queries; keys for dkv) and every
product is a chain of `mma.sync.m16n8k8` (funcgrad/cuda/mma.py): the first product of a tile
(scores = rows . streamed^T) reads both operands from shared memory, tiles stored [row][dim]
with a row stride of D + 4 words (conflict-free fragment loads); the second (probabilities .
values, and the backward's dS . K, P^T . dO, dS^T . Q) takes its A operand straight from the
first product's accumulators: the contraction's 8-wide slice is permuted (slot t <-> column
2t, slot t + 4 <-> column 2t + 1), which matches the accumulator layout, and the B operand is
read from shared memory in the same permuted order. Softmax statistics stay in float32; a row's
max and sum combine its four lanes by shuffles. Operands are rounded to tf32 (cvt.rna) when
stored to shared memory; probabilities when they enter the second product. The layout of
arguments, grid and outputs is attention_src.py's, so attention.py launches either (dkv adds
its head split, GS and PS, at the end).

Shared memory is dynamic, sized at launch (`smem_bytes`); a configuration over 48 KB needs the
kernel's opt-in (attention._opt_in), which lets head dim 128 run 4-warp blocks: before it, the
48 KB cap gave D = 128 two warps and 8-16 streamed rows (S2 on an H200, 2026-12-02: fwdl 12.7,
dq 17.8, dkv 34.6 ms a step). `budget` picks per head dim: up to 64 what needs no opt-in
(measured at W2's shapes), above it what keeps two blocks an SM; BY_DIM orders D = 128's
candidates as S2 measured them.

Tiles load with a thread on one column (4 columns, float4 loads and stores, where attention.py
found every operand 16-byte aligned: `vec`) walking rows NT / D apart from a hoisted base, a
batch of rows' loads issued before their stores (LOAD_FLOATS a thread in flight); the element
loop of before (a division, a 64-bit index and one load in flight per element) is kept for
shapes the threads do not tile.

The streamed tiles (K / V; dkv's Q / dO with their lse and delta) are prefetched a step ahead
where the registers allow (PREFETCH, PREFETCH_REGS): after the barrier that publishes a tile,
the next tile's loads are issued into registers, and they are stored at the next step, so their
latency hides behind this tile's products (bit-identical to loading in place).

dkv spreads a key head's G query heads over GS blocks (`dkv_splits`, shape-only) that write
partial dK | dV rows; `sum_source`'s kernel adds them in head order (deterministic, no atomics):
at S2 (4 query heads a key head, 64-row key tiles) 256 blocks become 1,024.
"""
from __future__ import annotations

import os

from funcgrad.compile import switches
from funcgrad.cuda.attention_tc_sim import SIM_SOURCE

# Shared memory is dynamic (sized at launch); a block over 48 KB opts in to more
# (attention.py: the kernel's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES). SMEM_BYTES is
# the most one block may take on sm_90 (H100 / H200: 227 KB); attention.py passes the device's
# own opt-in limit where it is lower.
SMEM_BYTES = 227 * 1024
DEFAULT_SMEM = 48 * 1024   # what a kernel gets without opting in
# (warps per block, streamed rows per tile) in order of preference; the first that fits the
# head dim's budget (`budget`) is used.
# W2's shapes on an H100 (benchmarks/bench_attention_tc.py, 2026-11-24), GPU us per kernel:
# fwdl (4, 32) 47, (4, 16) 51, (2, 16) 72; dq (4, 16) 57, (2, 32) 80; dkv (4, 16) 67, (2, 32) 80
# (the SIMT kernels: 86 / 123 / 138)
GPU_CONFIGS = {"fwd": [(4, 32), (4, 16), (2, 16), (2, 8), (1, 8)],
               "dq": [(4, 16), (2, 32), (2, 16), (2, 8), (1, 8)],
               "dkv": [(4, 16), (2, 32), (2, 16), (2, 8), (1, 8)]}
GPU_CONFIGS["fwdl"] = GPU_CONFIGS["fwd"]
# (mode, padded head dim) -> a preference list measured to beat GPU_CONFIGS' at that head dim.
# D = 128, S2's shapes (B4, 8 query heads on 2 key heads, T 2048, causal) on an H200
# (.bench/attn_tc.py, 2026-12-02), us per call by CUDA events (host gaps included: the
# CUPTI time of (4, 32) / (4, 16) / (4, 16) was 527 / 1033 / 1148 us against their events'
# 688 / 1192 / 1284): fwdl (8, 32) 482, (8, 16) 535, (4, 16) 573, (4, 64) 694; dq (4, 32) 970,
# (8, 16) 1062; dkv (4, 32) 1040, (8, 16) 1180. Outputs are bit-identical across them (a row's
# keys are summed in the same order whatever the tiles).
_FWD128 = [(8, 32), (4, 32), (4, 16), (2, 16), (2, 8), (1, 8)]
BY_DIM: dict = {("fwd", 128): _FWD128, ("fwdl", 128): _FWD128,
                ("dq", 128): [(4, 32), (4, 16), (2, 32), (2, 16), (2, 8), (1, 8)],
                ("dkv", 128): [(4, 32), (4, 16), (2, 32), (2, 16), (2, 8), (1, 8)]}
SIM_CONFIG = (1, 8)      # the simulator: one warp (the emulated mma needs the whole warp)
MODES = ("fwd", "fwdl", "dq", "dkv")
# dkv spreads a key head's G query heads over GS blocks (partials summed in head order by
# `sum_source`'s kernel) until the grid has TARGET_BLOCKS blocks: two waves of two resident
# 4-warp blocks on each of an H200's 132 SMs. Shape-only (never the device's SM count), so a
# shape's summation order, and its bits, are the same on every GPU.
TARGET_BLOCKS = 4 * 132
SIM_TARGET_BLOCKS = 4
# tile loads: a thread's rows a fixed column (float4 columns where attention.py found every
# operand aligned), several rows' loads issued before their stores; False: the generic
# element loop of before (benchmarks compare the two)
FAST_LOADS = True
LOAD_FLOATS = 16   # floats a thread's batch of loads brings (registers: at most these live)
# the streamed tiles' loads are issued a tile ahead, into registers (stored after the block's
# barrier): their latency hides behind the tile being computed (FUNCGRAD_ATTN_PREFETCH=0: off)
PREFETCH = os.environ.get("FUNCGRAD_ATTN_PREFETCH", "1") != "0"
# ... where the prefetched floats and the accumulators a lane holds stay under this many
# registers (S2's dkv at head dim 128, 4 x 32: 64 + 160, keeps loading in place)
PREFETCH_REGS = 192
switches.register(__name__, "SIM_CONFIG", "FAST_LOADS", "LOAD_FLOATS", "PREFETCH", "PREFETCH_REGS")

def smem_words(mode, D, W, BC):
    """Shared-memory words of one block: the row tiles, the streamed tiles (and dkv's stats)."""
    rows, cols = 16 * W * (D + 4), BC * (D + 4)
    return {"fwd": rows + 2 * cols, "fwdl": rows + 2 * cols, "dq": 2 * rows + 2 * cols,
            "dkv": 2 * rows + 2 * cols + 2 * BC}[mode]


def smem_bytes(mode, D, cfg):
    """Dynamic shared-memory bytes of one block of `mode` at padded head dim D."""
    return 4 * smem_words(mode, D, *cfg)


def budget(D):
    """Shared-memory bytes a head dim's preferred configuration may take: up to 64, what needs
    no opt-in (the configurations measured there); above, half an SM's 228 KB less the 1 KB a
    block reserves, so two blocks stay resident (D = 128: fwd's 8 warps x 32 keys, dq's and
    dkv's 4 warps x 32 rows, 101 KB each)."""
    return DEFAULT_SMEM if D <= 64 else 113 * 1024


def pick_config(mode, D, sim, limit=SMEM_BYTES):
    """(warps, streamed rows) for `mode` at padded head dim D, or None (nothing fits `limit`,
    the device's most shared memory per block)."""
    if sim:
        return SIM_CONFIG
    prefs = BY_DIM.get((mode, D), GPU_CONFIGS[mode])
    for cap in (min(limit, budget(D)), limit):
        for cfg in prefs:
            if smem_bytes(mode, D, cfg) <= cap:
                return tuple(cfg)
    return None


def dkv_splits(blocks, G, sim):
    """GS, the blocks a key head's G query heads are spread over (a divisor of G): the least
    that gives the dkv grid (`blocks` without the split) TARGET_BLOCKS blocks."""
    target = SIM_TARGET_BLOCKS if sim else TARGET_BLOCKS
    for d in range(1, G + 1):
        if G % d == 0 and blocks * d >= target:
            return d
    return max(G, 1)


class _Gen:
    def __init__(self, mode, D, cfg, sim, vec=False):
        self.mode, self.D, self.sim, self.vec = mode, D, sim, vec
        self.W, self.BC = cfg
        self.R, self.BR, self.NT = D + 4, 16 * self.W, 32 * self.W
        self.DT, self.NJ = D // 8, self.BC // 8
        self.L: list[str] = []

    def emit(self, ind, *lines):
        self.L += [("    " * ind) + x for x in lines]

    def mma(self, ind, a, b, c):
        """c (four lvalues) <- a . b + c for this warp."""
        pre = "scr, lane, " if self.sim else ""
        self.emit(ind, f"r0, r1, r2, r3 = mma_tf32({pre}{', '.join(a + b + c)})",
                  *(f"{x} = r{i}" for i, x in enumerate(c)))

    def load(self, ind, r0, limit, NR, ops, phase=None):
        """sm[base + r R + d] = tf32(op[b, r0 + r, head, d]) (0 outside [0, limit) x [0,
        width)) for r < NR, d < D, for each (op, head, width, base); coalesced along d.

        Where the block's threads cover whole rows (NT a multiple of D), a thread keeps one
        column d and walks rows NT / D apart: its global index is a hoisted base plus the row
        times the row stride, and UN rows' loads of every operand are issued before their
        stores (UN x operands loads in flight a thread, not one). phase "issue" emits only
        the loads (every row's, into registers), "store" only their stores (the prefetch of
        the next streamed tile: its loads fly while the block computes on this one); shapes
        the threads do not tile load whole in the "store" phase."""
        D, R, NT = self.D, self.R, self.NT
        if not self.tiled(NR):
            if phase == "issue":
                return
            self.emit(ind, f"for i in range(tid, {NR * D}, {self.NT}):", f"    r = i // {D}",
                      f"    d = i - r * {D}", f"    rr = {r0} + r")
            for op, head, width, base in ops:
                self.emit(ind + 1, "x = float32(0)", f"if rr < {limit} and d < {width}:",
                          f"    x = float32({op.upper()}a[uint64({op}o + b * {op}s0 + rr * "
                          f"{op}s1 + {head} * {op}s2 + d * {op}s3)])",
                          f"sm[uint64({base} + r * {R} + d)] = tf32(x)")
            return
        cw = self.cols(NR)
        rs = NT // cw
        steps = NR // rs
        per = len(ops) * D // cw   # floats a row of loads brings a thread
        un = max(u for u in range(1, steps + 1) if steps % u == 0 and u * per <= LOAD_FLOATS
                 or u == 1) if phase is None else steps
        if phase != "store":
            self.emit(ind, f"ldr = tid // {cw}", f"ldc = (tid - ldr * {cw}) * {D // cw}")
            for op, head, width, _ in ops:
                self.emit(ind, f"ld{op} = {op}o + b * {op}s0 + {head} * {op}s2 + ldc * {op}s3",
                          f"lw{op} = ldc < {width}")
        if phase is None:
            self.emit(ind, f"for u in range({steps // un}):")
            ind, u = ind + 1, f"u * {un} + "
        else:
            u = ""
        for k in range(un):
            self.emit(ind, f"lr{k} = ldr + ({u}{k}) * {rs}")
            if phase == "store":
                continue
            self.emit(ind, f"lrr{k} = {r0} + lr{k}")
            for op, _, _, _ in ops:
                if cw == D:
                    self.emit(ind, f"lx{op}{k} = float32(0)",
                              f"if lrr{k} < {limit} and lw{op}:",
                              f"    lx{op}{k} = float32({op.upper()}a[uint64(ld{op} + lrr{k} "
                              f"* {op}s1)])")
                    continue
                xs = [f"lx{op}{k}_{e}" for e in range(4)]
                self.emit(ind, *(f"{x} = float32(0)" for x in xs),
                          f"if lrr{k} < {limit} and lw{op}:",
                          f"    {', '.join(xs)} = ldv4({op.upper()}a, uint64(ld{op} + lrr{k} "
                          f"* {op}s1))")
        if phase == "issue":
            return
        for k in range(un):
            for op, _, _, base in ops:
                at = f"uint64({base} + lr{k} * {R} + ldc)"
                if cw == D:
                    self.emit(ind, f"sm[{at}] = tf32(lx{op}{k})")
                else:
                    self.emit(ind, f"st4(sm, {at}, "
                              + ", ".join(f"tf32(lx{op}{k}_{e})" for e in range(4)) + ")")

    def prefetches(self):
        """Whether the streamed tiles are prefetched: PREFETCH, a tiled shape, and the
        prefetched floats (two operands) plus the accumulators within PREFETCH_REGS."""
        accs = {"fwd": (1, 1), "fwdl": (1, 1), "dq": (1, 2), "dkv": (2, 2)}[self.mode]
        regs = (2 * self.BC * self.D // self.NT + 4 * self.DT * accs[0]
                + 4 * self.NJ * accs[1])
        return PREFETCH and self.tiled(self.BC) and regs <= PREFETCH_REGS

    def tiled(self, NR):
        """Whether the block's threads tile NR rows (one column each, rows NT / D apart)."""
        D, NT = self.D, self.NT
        return FAST_LOADS and NT % D == 0 and NR % (NT // D) == 0

    def cols(self, NR):
        """Threads a row of a tiled load (a thread: 4 columns when vec)."""
        D, NT = self.D, self.NT
        cw = D // 4 if self.vec else D
        return D if self.vec and (NT % cw or NR % (NT // cw)) else cw

    def streamed(self, ind, r0, limit, ops, pre=None):
        """The streamed tile at rows r0 .. into shared memory: loaded here, or (prefetch:
        PREFETCH and a tiled shape) its registers stored and the next tile's loads issued
        (pre: the loop's prologue, the first tile's loads issued before it)."""
        if not self.prefetches():
            if pre is None:
                self.load(ind, r0, limit, self.BC, ops)
                self.emit(ind, "cuda.syncthreads()")
            return False
        if pre is not None:
            self.load(ind, pre, limit, self.BC, ops, "issue")
            return True
        self.load(ind, "", limit, self.BC, ops, "store")
        self.emit(ind, "cuda.syncthreads()")
        self.load(ind, f"{r0} + {self.BC}", limit, self.BC, ops, "issue")
        return True

    def stats_regs(self, ind, c):
        """plse, pdl: the (lse, delta) of query row c + tid of head n1 (tid < BC; lse +inf
        where it is -inf or the row is past T: probabilities 0), the prefetch's registers."""
        self.emit(ind, "plse = POS", "pdl = float32(0)", f"if tid < {self.BC} and {c} + tid < T:",
                  f"    sti = sto + ((b * N + n1) * T + {c} + tid) * 2",
                  "    x = float32(ST[sti])", "    plse = POS if x == NEG else x",
                  "    pdl = float32(ST[sti + 1])")

    def zero(self, ind, name, n):
        self.emit(ind, f"for j in range({n}):", "    for e in range(4):",
                  f"        {name}[j, e] = float32(0)")

    def prod_rows(self, ind, acc, abase, bbase):
        """acc[j] (16 x 8 per j) = rows[wr0 .. wr0 + 16] . streamed[8 j .. 8 j + 8]^T over D."""
        R, NJ = self.R, self.NJ
        self.zero(ind, acc, NJ)
        self.emit(ind, f"for kk in range({self.DT}):",
                  f"    pa = uint64({abase} + (wr0 + g) * {R} + kk * 8 + t)",
                  "    a0 = sm[pa]", f"    a1 = sm[pa + uint64({8 * R})]",
                  "    a2 = sm[pa + uint64(4)]", f"    a3 = sm[pa + uint64({8 * R + 4})]",
                  f"    for j in range({NJ}):",
                  f"        pb = uint64({bbase} + (j * 8 + g) * {R} + kk * 8 + t)")
        self.mma(ind + 2, ["a0", "a1", "a2", "a3"], ["sm[pb]", "sm[pb + uint64(4)]"],
                 [f"{acc}[j, {e}]" for e in range(4)])

    def prod_out(self, ind, out, src, bbase):
        """out[dn] += src (16 x BC, accumulator layout) . streamed[BC x D] (rows [row][dim])."""
        R = self.R
        for j in range(self.NJ):   # unrolled here: src[j] must stay in registers
            self.emit(ind, f"a0 = tf32({src}[{j}, 0])", f"a1 = tf32({src}[{j}, 2])",
                      f"a2 = tf32({src}[{j}, 1])", f"a3 = tf32({src}[{j}, 3])",
                      f"pb = uint64({bbase} + ({j * 8} + 2 * t) * {R} + g)",
                      f"for dn in range({self.DT}):", "    q_ = pb + uint64(dn * 8)")
            self.mma(ind + 1, ["a0", "a1", "a2", "a3"], ["sm[q_]", f"sm[q_ + uint64({R})]"],
                     [f"{out}[dn, {e}]" for e in range(4)])

    def group(self, ind, var, op):
        """var <- the max / sum of var over the four lanes of its row (t = 0..3)."""
        comb = (lambda a, b: f"max({a}, {b})") if op == "max" else (lambda a, b: f"{a} + {b}")
        if not self.sim:
            for off in (1, 2):
                self.emit(ind, f"{var} = "
                          f"{comb(var, f'cuda.shfl_xor_sync(0xffffffff, {var}, {off})')}")
            return
        self.emit(ind, f"red[lane] = {var}", "cuda.syncthreads()", "v_ = red[g * 4]",
                  "for u in range(1, 4):", f"    v_ = {comb('v_', 'red[g * 4 + u]')}",
                  "cuda.syncthreads()", f"{var} = v_")

    def header(self, ops, extra, out, tail=""):
        words = smem_words(self.mode, self.D, self.W, self.BC)
        args = ", ".join(f"{x.upper()}a, {x}o, {x}s0, {x}s1, {x}s2, {x}s3" for x in ops)
        self.emit(0, "", "@cuda.jit(OPTS)",
                  f"def kernel({args}{extra}, {out}, outo, T, S, N, G, H, HV, causal, "
                  f"scale_{tail}):")
        align = "" if self.sim else ", alignment=16"   # (the simulator rejects alignment=)
        self.emit(1, f"sm = cuda.shared.array(0, float32{align})   # {words} words at launch")
        if self.sim:
            self.emit(1, "scr = cuda.shared.array(192, float32)",
                      "red = cuda.shared.array(32, float32)")
        self.emit(1, "tid = cuda.threadIdx.x", "w = tid // 32", "lane = tid - w * 32",
                  "g = lane // 4", "t = lane - g * 4", "wr0 = w * 16", "sc = float32(scale_)",
                  "NEG = float32(-math.inf)", "POS = float32(math.inf)")

    def local(self, *names):
        for name, n in names:
            self.emit(1, f"{name} = cuda.local.array(({n}, 4), float32)")

    def query_rows(self):
        self.emit(1, "bn = cuda.blockIdx.x", "b = bn // N", "n = bn - b * N", "kh = n // G",
                  f"row0 = (cuda.gridDim.y - 1 - cuda.blockIdx.y) * {self.BR}",
                  f"lim = min(S, row0 + {self.BR}) if causal else S",
                  "rowA = row0 + wr0 + g", "rowB = rowA + 8")

    def entries(self, ind, c0):
        """Loop header over this lane's accumulator entries j, e and their column `col`
        (offset c0); entries e < 2 are in the lane's first row, e >= 2 in the one 8 below."""
        self.emit(ind, f"for j in range({self.NJ}):", "    for e in range(4):",
                  f"        col = {c0} + j * 8 + 2 * t + (e & 1)")

    def store_rows(self, ind, rows, acc, dst, base, width, coeff="", bound="T"):
        """dst[base(row) + d] = acc * coeff for this lane's rows below `bound`, d < width."""
        for row, e0 in rows:
            self.emit(ind, f"if {row} < {bound}:", f"    ob = {base.format(row=row)}",
                      f"    for dn in range({self.DT}):", "        d = dn * 8 + 2 * t",
                      f"        if d < {width}:",
                      f"            {dst}[uint64(ob + d)] = float32({acc}[dn, {e0}]{coeff})",
                      f"        if d + 1 < {width}:",
                      f"            {dst}[uint64(ob + d + 1)] = "
                      f"float32({acc}[dn, {e0 + 1}]{coeff})")


def _fwd(g, lse_out):
    BR, BC, R = g.BR, g.BC, g.R
    QB, KB, VB = 0, BR * R, BR * R + BC * R
    g.header(["q", "k", "v"], ", La, lo" if lse_out else "", "O")
    g.local(("s", g.NJ), ("o", g.DT))
    g.query_rows()
    g.load(1, "row0", "T", BR, [("q", "n", "H", QB)])
    g.zero(1, "o", g.DT)
    kv = [("k", "kh", "H", KB), ("v", "kh", "HV", VB)]
    g.streamed(1, None, "S", kv, pre="0")
    g.emit(1, "m0 = NEG", "m1 = NEG", "l0 = float32(0)", "l1 = float32(0)",
           f"for c0 in range(0, lim, {BC}):", "    cuda.syncthreads()")
    g.streamed(2, "c0", "S", kv)
    g.prod_rows(2, "s", QB, KB)
    g.emit(2, "mx0 = NEG", "mx1 = NEG")
    g.entries(2, "c0")
    g.emit(4, "row = rowA if e < 2 else rowB", "x = s[j, e] * sc",
           "if col >= S or (causal and col > row):", "    x = NEG", "s[j, e] = x",
           "if e < 2:", "    mx0 = max(mx0, x)", "else:", "    mx1 = max(mx1, x)")
    g.group(2, "mx0", "max")
    g.group(2, "mx1", "max")
    g.emit(2, "mn0 = max(m0, mx0)", "mu0 = mn0 if mn0 > NEG else float32(0)",
           "al0 = math.exp(m0 - mu0)", "m0 = mn0", "mn1 = max(m1, mx1)",
           "mu1 = mn1 if mn1 > NEG else float32(0)", "al1 = math.exp(m1 - mu1)", "m1 = mn1",
           "ls0 = float32(0)", "ls1 = float32(0)", f"for j in range({g.NJ}):",
           "    x0 = math.exp(s[j, 0] - mu0)", "    x1 = math.exp(s[j, 1] - mu0)",
           "    x2 = math.exp(s[j, 2] - mu1)", "    x3 = math.exp(s[j, 3] - mu1)",
           "    s[j, 0] = x0", "    s[j, 1] = x1", "    s[j, 2] = x2", "    s[j, 3] = x3",
           "    ls0 += x0 + x1", "    ls1 += x2 + x3",
           "l0 = l0 * al0 + ls0", "l1 = l1 * al1 + ls1", f"for dn in range({g.DT}):",
           "    o[dn, 0] *= al0", "    o[dn, 1] *= al0", "    o[dn, 2] *= al1",
           "    o[dn, 3] *= al1")
    g.prod_out(2, "o", "s", VB)
    g.group(1, "l0", "sum")
    g.group(1, "l1", "sum")
    g.emit(1, "inv0 = float32(1) / l0 if l0 > 0 else float32(0)",
           "inv1 = float32(1) / l1 if l1 > 0 else float32(0)")
    base = "outo + ((b * T + {row}) * N + n) * HV"
    g.store_rows(1, [("rowA", 0)], "o", "O", base, "HV", " * inv0")
    g.store_rows(1, [("rowB", 2)], "o", "O", base, "HV", " * inv1")
    if lse_out:
        for row, m, l_ in (("rowA", "m0", "l0"), ("rowB", "m1", "l1")):
            g.emit(1, f"if t == 0 and {row} < T:",
                   f"    La[uint64(lo + (b * N + n) * T + {row})] = "
                   f"float32({m} + math.log({l_})) if {l_} > 0 else NEG")


def _dq(g):
    BR, BC, R = g.BR, g.BC, g.R
    QB, GB, KB = 0, BR * R, 2 * BR * R
    VB = KB + BC * R
    g.header(["q", "k", "v", "g"], ", ST, sto", "DQ")
    g.local(("s", g.NJ), ("p", g.NJ), ("dq", g.DT))
    g.query_rows()
    g.load(1, "row0", "T", BR, [("q", "n", "H", QB), ("g", "n", "HV", GB)])
    for i, row in ((0, "rowA"), (1, "rowB")):   # -inf logsumexp -> +inf: probabilities 0
        g.emit(1, f"lse{i} = POS", f"dl{i} = float32(0)", f"if {row} < T:",
               f"    sti = sto + ((b * N + n) * T + {row}) * 2", "    x = float32(ST[sti])",
               f"    lse{i} = POS if x == NEG else x", f"    dl{i} = float32(ST[sti + 1])")
    g.zero(1, "dq", g.DT)
    kv = [("k", "kh", "H", KB), ("v", "kh", "HV", VB)]
    g.streamed(1, None, "S", kv, pre="0")
    g.emit(1, f"for c0 in range(0, lim, {BC}):", "    cuda.syncthreads()")
    g.streamed(2, "c0", "S", kv)
    g.prod_rows(2, "s", QB, KB)
    g.prod_rows(2, "p", GB, VB)
    # dS = P * (dP - delta), P = exp(s q.k - lse) (masked: 0)
    g.entries(2, "c0")
    g.emit(4, "row = rowA if e < 2 else rowB", "ls = lse0 if e < 2 else lse1",
           "dl = dl0 if e < 2 else dl1", "x = math.exp(s[j, e] * sc - ls)",
           "if col >= S or (causal and col > row):", "    x = float32(0)",
           "s[j, e] = x * (p[j, e] - dl)")
    g.prod_out(2, "dq", "s", KB)
    base = "outo + ((b * T + {row}) * N + n) * H"
    g.store_rows(1, [("rowA", 0), ("rowB", 2)], "dq", "DQ", base, "H", " * sc")


def _dkv(g):
    """dK, dV of BR key rows over the query heads gs G / GS .. (gs + 1) G / GS of their key
    head (gs = the block's split; GS = 1: all of them), summed head by head, query tile by
    query tile; split blocks store partials GS * PS apart (PS = B S K (H + Hv))."""
    BR, BC, R = g.BR, g.BC, g.R
    KB, VB, QB = 0, BR * R, 2 * BR * R
    GB = QB + BC * R
    LB = GB + BC * R
    g.header(["q", "k", "v", "g"], ", ST, sto", "DKV", ", GS, PS")
    g.local(("s", g.NJ), ("p", g.NJ), ("dk", g.DT), ("dv", g.DT))
    g.emit(1, "KH = N // G", "GH = G // GS", "bk = cuda.blockIdx.x", "BK = cuda.gridDim.x // GS",
           "gs = bk // BK", "bk = bk - gs * BK", "b = bk // KH", "kh = bk - b * KH",
           f"row0 = cuda.blockIdx.y * {BR}", f"start = (row0 // {BC}) * {BC} if causal else 0",
           "keyA = row0 + wr0 + g", "keyB = keyA + 8")
    g.load(1, "row0", "S", BR, [("k", "kh", "H", KB), ("v", "kh", "HV", VB)])
    g.zero(1, "dk", g.DT)
    g.zero(1, "dv", g.DT)
    qg = [("q", "n1", "H", QB), ("g", "n1", "HV", GB)]
    # one loop over (query head, query tile); with prefetch, the next step's tile (n1, c1)
    g.emit(1, f"nt = (T - start + {BC - 1}) // {BC}", "n1 = kh * G + gs * GH", "c1 = start")
    pf = g.BC <= g.NT and g.streamed(1, None, "T", qg, pre="c1")
    if pf:
        g.stats_regs(1, "c1")
    g.emit(1, "for it in range(GH * nt):", "    gi = it // nt", "    n = kh * G + gs * GH + gi",
           f"    c0 = start + (it - gi * nt) * {BC}", "    cuda.syncthreads()")
    if pf:
        g.emit(2, "n1 = n + (1 if it - gi * nt == nt - 1 else 0)",
               f"c1 = start if it - gi * nt == nt - 1 else c0 + {BC}",
               "if it == GH * nt - 1:", "    c1 = T")
        g.load(2, "", "T", BC, qg, "store")
        g.emit(2, "if tid < " + str(BC) + ":", f"    sm[{LB} + tid] = plse",
               f"    sm[{LB + BC} + tid] = pdl", "cuda.syncthreads()")
        g.load(2, "c1", "T", BC, qg, "issue")
        g.stats_regs(2, "c1")
    else:
        g.load(2, "c0", "T", BC, [("q", "n", "H", QB), ("g", "n", "HV", GB)])
        g.emit(2, f"for j in range(tid, {BC}, {g.NT}):", "    tq = c0 + j", "    lse_ = POS",
               "    dl_ = float32(0)", "    if tq < T:",
               "        sti = sto + ((b * N + n) * T + tq) * 2", "        x = float32(ST[sti])",
               "        lse_ = POS if x == NEG else x", "        dl_ = float32(ST[sti + 1])",
               f"    sm[{LB} + j] = lse_", f"    sm[{LB + BC} + j] = dl_", "cuda.syncthreads()")
    g.prod_rows(2, "s", KB, QB)
    g.prod_rows(2, "p", VB, GB)
    # P^T and dS^T (a key row sees queries at or after it when causal)
    g.entries(2, "c0")
    g.emit(4, "key = keyA if e < 2 else keyB", "li = j * 8 + 2 * t + (e & 1)",
           f"x = math.exp(s[j, e] * sc - sm[{LB} + li])",
           "if causal and col < key:", "    x = float32(0)", "s[j, e] = x",
           f"p[j, e] = x * (p[j, e] - sm[{LB + BC} + li])")
    g.prod_out(2, "dv", "s", GB)
    g.prod_out(2, "dk", "p", QB)
    base = "outo + gs * PS + ((b * S + {row}) * KH + kh) * (H + HV)"
    rows = [("keyA", 0), ("keyB", 2)]
    g.store_rows(1, rows, "dk", "DKV", base, "H", " * sc", bound="S")
    g.store_rows(1, rows, "dv", "DKV", base + " + H", "HV", bound="S")


SUM_SOURCE = """
@cuda.jit(OPTS)
def kernel(P, po, O, oo, M, GS):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    step = cuda.gridDim.x * cuda.blockDim.x
    while i < M:
        acc = P[uint64(po + i)]
        for gg in range(1, GS):
            acc += P[uint64(po + gg * M + i)]
        O[uint64(oo + i)] = acc
        i += step
"""


def sum_source(opts):
    """dkv's partial sum: O[oo + i] = P[po + i] + P[po + M + i] + ... (GS terms, in order)."""
    return SUM_SOURCE.replace("OPTS", opts)


def source(mode, D, cfg, sim, opts, vec=False):
    """Kernel source for `mode` ('fwd', 'fwdl', 'dq', 'dkv') at padded head dim D; vec: every
    operand's rows start 16-byte aligned with unit column stride and a width that is a multiple
    of 4 (attention.py checks), so tiles load as float4s (the simulator: four scalars)."""
    g = _Gen(mode, D, cfg, sim, vec)
    {"fwd": lambda: _fwd(g, False), "fwdl": lambda: _fwd(g, True), "dq": lambda: _dq(g),
     "dkv": lambda: _dkv(g)}[mode]()
    pre = SIM_SOURCE if sim else ("from funcgrad.cuda.mma import mma_tf32, tf32\n"
                                  "from funcgrad.cuda.vecmem import ldv4\n"
                                  "from funcgrad.cuda.attention_ld import st4\n")
    return pre + "\n".join(g.L).replace("OPTS", opts) + "\n"
