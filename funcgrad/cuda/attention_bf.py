"""Source generator of the bfloat16 tensor-core flash-attention kernels (fwd, stats, dq, dkv).

bfloat16 q / k / v / do on `mma.sync.m16n8k16` (funcgrad/cuda/mma.py: bf16 pairs packed in
32-bit registers, float32 accumulators), the TF32 kernels' scheme (attention_tc.py): a warp
owns 16 rows, the other side streams through shared memory, the softmax statistics (lse,
delta) stay float32. Every tile is stored [row][dim] as packed pairs, a row D / 2 + 4 words
apart (conflict-free fragment loads). The first product of a tile (rows . streamed^T, the
contraction over dims) reads 32-bit words; the second (probabilities . values, dS . K,
P^T . dO, dS^T . Q) takes its A operand from the first product's accumulators (two 16 x 8
accumulator tiles are one 16 x 16 A fragment: no permutation) packed to bf16 (cvt.rn), and its
B operand (contraction over the streamed rows) as two 16-bit loads a register (the row
layout, no transposed copy). Lines are generated fully unrolled: accumulators and fragments
are scalars, so they live in registers.

Global operands are read as 16-byte quads of pairs where every row starts 16-byte aligned
with unit column stride and a width that is a multiple of 8 ("quad" mode, attention_bfl
checks), else as uint16 elements through their strides; a streamed tile's quads are loaded
a step ahead into registers (PREFETCH, where the registers allow). Outputs: o and dq bf16
through a row and a head stride; dkv's float32 partials [GS, B, S, K, H + Hv] (a key head's
query heads over GS blocks), which `sum_source`'s kernel adds in head order and rounds to
bf16 (deterministic, one rounding); stats writes (lse, delta) float32 rows in
attention_stats' layout. The simulator runs the same source with Python stand-ins for the
intrinsics (SIM_SOURCE, one warp a block).
"""
from __future__ import annotations

from funcgrad.compile import switches
from funcgrad.cuda.attention_bf_sim import SIM_SOURCE

SIM_CONFIG = (1, 16)   # the simulator: one warp (the emulated mma needs the whole warp)
MODES = ("fwd", "stats", "dq", "dkv")
# (warps, streamed rows) in order of preference; the first whose shared memory fits the budget
GPU_CONFIGS = {"fwd": [(4, 64), (4, 32), (2, 32), (1, 16)],
               "stats": [(4, 64), (4, 32), (2, 32), (1, 16)],
               "dq": [(4, 64), (4, 32), (2, 32), (1, 16)],
               "dkv": [(4, 32), (4, 16), (2, 32), (1, 16)]}
BY_DIM: dict = {}   # (mode, padded head dim) -> a preference list measured to beat GPU_CONFIGS'
DEFAULT_SMEM = 48 * 1024
BUDGET = 113 * 1024   # two blocks an SM (attention_tc.budget)
LOAD_WORDS = 16   # words a thread's batch of tile loads brings (issued before their stores)
PREFETCH = True   # streamed tiles' loads issued a step ahead (their latency behind the products)
PREFETCH_REGS = 192   # ... where those words and the accumulators of a lane stay under this
switches.register(__name__, "SIM_CONFIG", "PREFETCH", "PREFETCH_REGS", "LOAD_WORDS")

def row_words(D):
    """Words between two rows of a tile: D / 2 pairs and 4 words of padding."""
    return D // 2 + 4


def smem_bytes(mode, D, cfg):
    """Dynamic shared-memory bytes of one block of `mode` at padded head dim D."""
    W, BC = cfg
    BR, RW = 16 * W, row_words(D)
    words = {"fwd": (BR + 2 * BC) * RW, "stats": (BR + BC) * RW,
             "dq": (2 * BR + 2 * BC) * RW, "dkv": (2 * BR + 2 * BC) * RW + 2 * BC}[mode]
    return 4 * words


def pick_config(mode, D, sim, limit):
    """(warps, streamed rows) for `mode` at padded head dim D (a multiple of 16), or None."""
    if sim:
        return SIM_CONFIG
    prefs = BY_DIM.get((mode, D), GPU_CONFIGS[mode])
    for cap in (min(limit, BUDGET), limit):
        for cfg in prefs:
            if smem_bytes(mode, D, cfg) <= cap:
                return tuple(cfg)
    return None


class _Gen:
    def __init__(self, mode, D, cfg, sim, quad):
        self.mode, self.D, self.sim, self.quad = mode, D, sim, quad
        self.W, self.BC = cfg
        self.BR, self.NT, self.RW = 16 * self.W, 32 * self.W, row_words(D)
        self.DW, self.DK, self.DN, self.NJ = D // 2, D // 16, D // 8, self.BC // 8
        self.L: list[str] = []

    def emit(self, ind, *lines):
        self.L += [("    " * ind) + x for x in lines]

    def mma(self, ind, a, b, c):
        """c (four lvalues) <- a . b + c for this warp."""
        pre = "scr, lane, " if self.sim else ""
        self.emit(ind, f"r0, r1, r2, r3 = mma_bf16({pre}{', '.join(a + b + c)})",
                  *(f"{x} = r{i}" for i, x in enumerate(c)))

    # -- tiles ---------------------------------------------------------------------------

    def prefetches(self):
        """Whether the streamed tiles are prefetched: PREFETCH, a tiled shape, and the
        prefetched words plus the accumulators (and cached fragments) within PREFETCH_REGS."""
        ops, outs, scores, frags = {"fwd": (2, 1, 1, 1), "stats": (1, 0, 1, 1),
                                    "dq": (2, 1, 2, 0), "dkv": (2, 2, 2, 0)}[self.mode]
        regs = (ops * self.BC * self.DW // self.NT + 4 * self.DN * outs
                + 4 * self.NJ * scores + 4 * self.DK * frags)
        return PREFETCH and self.tiled(self.BC) and regs <= PREFETCH_REGS

    def tiled(self, NR):
        """Whether quads (4 words, 8 dims) tile NR rows: a thread one quad column, rows
        NT / (D / 8) apart."""
        cw = self.DW // 4
        return self.quad and self.NT % cw == 0 and NR % (self.NT // cw) == 0

    def load(self, ind, r0, limit, NR, ops, phase=None):
        """sw[base + r RW + c] = the pair (2c, 2c + 1) of op[b, r0 + r, head, :] (0 outside
        [0, limit) x [0, width)), r < NR, c < D / 2, for each (op, head, width, base).

        Tiled (quad mode): a thread keeps one 16-byte column and walks rows apart, a batch of
        rows' loads issued before their stores; phase "issue" emits only the loads (every
        row's, into registers), "store" only their stores (a streamed tile prefetched a step
        ahead). Otherwise an element loop of 16-bit loads (loaded whole in the "store"
        phase)."""
        DW, NT, RW = self.DW, self.NT, self.RW
        if not self.tiled(NR):
            if phase == "issue":
                return
            self.emit(ind, f"for i in range(tid, {NR * DW}, {NT}):", f"    r = i // {DW}",
                      f"    c = i - r * {DW}", f"    rr = {r0} + r")
            for op, head, width, base in ops:
                at = f"{op}o + b * {op}s0 + rr * {op}s1 + {head} * {op}s2"
                A = op.upper()
                self.emit(ind + 1, "x = uint32(0)", f"if rr < {limit}:",
                          f"    if c * 2 < {width}:",
                          f"        x = uint32({A}a[uint64({at} + c * 2 * {op}s3)])",
                          f"    if c * 2 + 1 < {width}:",
                          f"        x = uint32(x | (uint32({A}a[uint64({at} + (c * 2 + 1) * "
                          f"{op}s3)]) << uint32(16)))",
                          f"sw[uint64({base} + r * {RW} + c)] = x")
            return
        cw = DW // 4
        rs = NT // cw
        steps = NR // rs
        un = max(1, LOAD_WORDS // (4 * len(ops))) if phase is None else steps
        while steps % un:
            un -= 1
        if phase != "store":
            self.emit(ind, f"ldr = tid // {cw}", f"ldc = (tid - ldr * {cw}) * 4")
            for op, head, width, _ in ops:
                self.emit(ind, f"ld{op} = {op}o + b * {op}s0 + {head} * {op}s2 + ldc",
                          f"lw{op} = ldc * 2 < {width}")
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
                xs = [f"lx{op}{k}_{e}" for e in range(4)]
                self.emit(ind, *(f"{x} = uint32(0)" for x in xs),
                          f"if lrr{k} < {limit} and lw{op}:",
                          f"    {', '.join(xs)} = ldv4({op.upper()}a, uint64(ld{op} + lrr{k} "
                          f"* {op}s1))")
        if phase == "issue":
            return
        for k in range(un):
            for op, _, _, base in ops:
                self.emit(ind, f"st4(sw, uint64({base} + lr{k} * {RW} + ldc), "
                          + ", ".join(f"lx{op}{k}_{e}" for e in range(4)) + ")")

    def streamed(self, ind, r0, limit, ops, pre=None):
        """The streamed tile at rows r0 .. into shared memory (then a barrier): loaded here,
        or (PREFETCH, a tiled shape) its registers stored and the next tile's loads issued
        (pre: the first tile's row, the loop's prologue issuing its loads)."""
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

    # -- products ------------------------------------------------------------------------

    def zero(self, ind, name, n):
        self.emit(ind, f"for j in range({n}):", "    for e in range(4):",
                  f"        {name}[j, e] = float32(0)")

    def cache_rows(self, ind, name, base):
        """name[kk, 0..3]: this warp's A fragments of the row tile at base (registers)."""
        RW = self.RW
        self.emit(ind, f"for kk in range({self.DK}):",
                  f"    pa = uint64({base} + (wr0 + g) * {RW} + kk * 8 + t)",
                  f"    {name}[kk, 0] = sw[pa]", f"    {name}[kk, 1] = sw[pa + uint64({8 * RW})]",
                  f"    {name}[kk, 2] = sw[pa + uint64(4)]",
                  f"    {name}[kk, 3] = sw[pa + uint64({8 * RW + 4})]")

    def prod_rows(self, ind, acc, abase, bbase, cached=None):
        """acc[j] (16 x 8 each) = rows[wr0 ..] . streamed[8 j ..]^T over the dims; the A
        fragments from registers (cached: their array) or shared memory."""
        RW = self.RW
        self.zero(ind, acc, self.NJ)
        self.emit(ind, f"for kk in range({self.DK}):")
        if cached:
            self.emit(ind + 1, *(f"a{i} = {cached}[kk, {i}]" for i in range(4)))
        else:
            self.emit(ind + 1, f"pa = uint64({abase} + (wr0 + g) * {RW} + kk * 8 + t)",
                      "a0 = sw[pa]", f"a1 = sw[pa + uint64({8 * RW})]", "a2 = sw[pa + uint64(4)]",
                      f"a3 = sw[pa + uint64({8 * RW + 4})]")
        self.emit(ind + 1, f"for j in range({self.NJ}):",
                  f"    pb = uint64({bbase} + (j * 8 + g) * {RW} + kk * 8 + t)")
        self.mma(ind + 2, ["a0", "a1", "a2", "a3"], ["sw[pb]", "sw[pb + uint64(4)]"],
                 [f"{acc}[j, {e}]" for e in range(4)])

    def prod_out(self, ind, out, src, bbase):
        """out[dn] += src (16 x BC, accumulator layout) . streamed[BC x D] (its rows the
        contraction: two 16-bit loads a B register)."""
        RH = 2 * self.RW
        for kb in range(self.BC // 16):   # unrolled here: src[j] must stay in registers
            j0, j1 = 2 * kb, 2 * kb + 1
            self.emit(ind, f"pa0 = pack_bf16({src}[{j0}, 0], {src}[{j0}, 1])",
                      f"pa1 = pack_bf16({src}[{j0}, 2], {src}[{j0}, 3])",
                      f"pa2 = pack_bf16({src}[{j1}, 0], {src}[{j1}, 1])",
                      f"pa3 = pack_bf16({src}[{j1}, 2], {src}[{j1}, 3])",
                      f"hb = uint64({2 * bbase} + ({kb * 16} + 2 * t) * {RH} + g)",
                      f"for dn in range({self.DN}):", "    h = hb + uint64(dn * 8)",
                      f"    pb0 = uint32(uint32(sh[h]) | (uint32(sh[h + uint64({RH})]) << "
                      "uint32(16)))",
                      f"    pb1 = uint32(uint32(sh[h + uint64({8 * RH})]) | "
                      f"(uint32(sh[h + uint64({9 * RH})]) << uint32(16)))")
            self.mma(ind + 1, ["pa0", "pa1", "pa2", "pa3"], ["pb0", "pb1"],
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

    def entries(self, ind, c0):
        """Loop header over this lane's accumulator entries j, e and their column `col`;
        entries e < 2 are in the lane's first row, e >= 2 in the one 8 below."""
        self.emit(ind, f"for j in range({self.NJ}):", "    for e in range(4):",
                  f"        col = {c0} + j * 8 + 2 * t + (e & 1)")

    # -- kernel frame --------------------------------------------------------------------

    def header(self, ops, extra, out, tail=""):
        args = ", ".join(f"{x.upper()}a, {x}o, {x}s0, {x}s1, {x}s2, {x}s3" for x in ops)
        self.emit(0, "", "@cuda.jit(OPTS)",
                  f"def kernel({args}{extra}, {out}, T, S, N, G, H, HV, causal, scale_{tail}):")
        align = "" if self.sim else ", alignment=16"
        self.emit(1, f"sw = cuda.shared.array(0, uint32{align})",
                  f"sh = cuda.shared.array(0, uint16{align})",
                  f"sf = cuda.shared.array(0, float32{align})")
        if self.sim:
            self.emit(1, "scr = cuda.shared.array(384, float32)",
                      "red = cuda.shared.array(32, float32)")
        self.emit(1, "tid = cuda.threadIdx.x", "w = tid // 32", "lane = tid - w * 32",
                  "g = lane // 4", "t = lane - g * 4", "wr0 = w * 16", "sc = float32(scale_)",
                  "NEG = float32(-math.inf)", "POS = float32(math.inf)")

    def local(self, *names, dtype="float32"):
        for name, n in names:
            self.emit(1, f"{name} = cuda.local.array(({n}, 4), {dtype})")

    def query_rows(self):
        self.emit(1, "bn = cuda.blockIdx.x", "b = bn // N", "n = bn - b * N", "kh = n // G",
                  f"row0 = (cuda.gridDim.y - 1 - cuda.blockIdx.y) * {self.BR}",
                  f"lim = min(S, row0 + {self.BR}) if causal else S",
                  "rowA = row0 + wr0 + g", "rowB = rowA + 8")

    def store_bf(self, ind, acc, rows, width, coeff=""):
        """O[base(row) + d] = bf16(acc * coeff), d < width, for (row, e0) in rows."""
        for row, e0 in rows:
            self.emit(ind, f"if {row} < T:", f"    ob = oo + (b * T + {row}) * ors + n * ohs",
                      f"    for dn in range({self.DN}):", "        d = dn * 8 + 2 * t",
                      f"        pw = pack_bf16({acc}[dn, {e0}]{coeff}, "
                      f"{acc}[dn, {e0 + 1}]{coeff})",
                      f"        if d < {width}:",
                      "            Oa[uint64(ob + d)] = uint16(pw & uint32(65535))",
                      f"        if d + 1 < {width}:",
                      "            Oa[uint64(ob + d + 1)] = uint16(pw >> uint32(16))")


def _softmax_tile(g, with_o):
    """The online softmax step of a tile's scores s (fwd, stats)."""
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
           "    ls0 += x0 + x1", "    ls1 += x2 + x3", "l0 = l0 * al0 + ls0", "l1 = l1 * al1 + ls1")
    if with_o:
        g.emit(2, f"for dn in range({g.DN}):", "    o[dn, 0] *= al0", "    o[dn, 1] *= al0",
               "    o[dn, 2] *= al1", "    o[dn, 3] *= al1")


def _fwd(g):
    BR, BC, RW = g.BR, g.BC, g.RW
    QB, KB, VB = 0, BR * RW, (BR + BC) * RW
    g.header(["q", "k", "v"], "", "Oa, oo, ors, ohs")
    g.local(("s", g.NJ), ("o", g.DN))
    g.local(("qf", g.DK), dtype="uint32")
    g.query_rows()
    g.load(1, "row0", "T", BR, [("q", "n", "H", QB)])
    g.emit(1, "cuda.syncthreads()")
    g.cache_rows(1, "qf", QB)   # this warp's query fragments stay in registers
    g.zero(1, "o", g.DN)
    kv = [("k", "kh", "H", KB), ("v", "kh", "HV", VB)]
    g.streamed(1, None, "S", kv, pre="0")
    g.emit(1, "m0 = NEG", "m1 = NEG", "l0 = float32(0)", "l1 = float32(0)",
           f"for c0 in range(0, lim, {BC}):", "    cuda.syncthreads()")
    g.streamed(2, "c0", "S", kv)
    g.prod_rows(2, "s", QB, KB, cached="qf")
    _softmax_tile(g, True)
    g.prod_out(2, "o", "s", VB)
    g.group(1, "l0", "sum")
    g.group(1, "l1", "sum")
    g.emit(1, "inv0 = float32(1) / l0 if l0 > 0 else float32(0)",
           "inv1 = float32(1) / l1 if l1 > 0 else float32(0)")
    g.store_bf(1, "o", [("rowA", 0)], "HV", " * inv0")
    g.store_bf(1, "o", [("rowB", 2)], "HV", " * inv1")


def _stats(g):
    """attention_stats: the rows' logsumexp (fwd without P . V) and delta = sum(o * do)."""
    BR, BC, RW = g.BR, g.BC, g.RW
    QB, KB = 0, BR * RW
    g.header(["q", "k", "o", "g"], "", "ST, sto")
    g.local(("s", g.NJ))
    g.local(("qf", g.DK), dtype="uint32")
    g.query_rows()
    g.load(1, "row0", "T", BR, [("q", "n", "H", QB)])
    g.emit(1, "cuda.syncthreads()")
    g.cache_rows(1, "qf", QB)
    ks = [("k", "kh", "H", KB)]
    g.streamed(1, None, "S", ks, pre="0")
    g.emit(1, "m0 = NEG", "m1 = NEG", "l0 = float32(0)", "l1 = float32(0)",
           f"for c0 in range(0, lim, {BC}):", "    cuda.syncthreads()")
    g.streamed(2, "c0", "S", ks)
    g.prod_rows(2, "s", QB, KB, cached="qf")
    _softmax_tile(g, False)
    g.group(1, "l0", "sum")
    g.group(1, "l1", "sum")
    for row, m, l_ in (("rowA", "m0", "l0"), ("rowB", "m1", "l1")):
        g.emit(1, f"if t == 0 and {row} < T:",
               f"    ST[uint64(sto + ((b * N + n) * T + {row}) * 2)] = "
               f"float32({m} + math.log({l_})) if {l_} > 0 else NEG")
    # delta: a thread a row, o and do as uint16 elements through their strides
    g.emit(1, f"for r in range(tid, {BR}, {g.NT}):", "    row = row0 + r", "    if row < T:",
           "        ob = oo + b * os0 + row * os1 + n * os2",
           "        gb = go + b * gs0 + row * gs1 + n * gs2", "        acc = float32(0)",
           "        for d in range(HV):",
           "            x = u2f(uint32(uint32(Oa[uint64(ob + d * os3)]) << uint32(16)))",
           "            y = u2f(uint32(uint32(Ga[uint64(gb + d * gs3)]) << uint32(16)))",
           "            acc += x * y",
           "        ST[uint64(sto + ((b * N + n) * T + row) * 2 + 1)] = acc")


def _dq(g):
    BR, BC, RW = g.BR, g.BC, g.RW
    QB, GB, KB = 0, BR * RW, 2 * BR * RW
    VB = KB + BC * RW
    g.header(["q", "k", "v", "g"], ", ST, sto", "Oa, oo, ors, ohs")
    g.local(("s", g.NJ), ("p", g.NJ), ("dq", g.DN))
    g.query_rows()
    g.load(1, "row0", "T", BR, [("q", "n", "H", QB), ("g", "n", "HV", GB)])
    for i, row in ((0, "rowA"), (1, "rowB")):   # -inf logsumexp -> +inf: probabilities 0
        g.emit(1, f"lse{i} = POS", f"dl{i} = float32(0)", f"if {row} < T:",
               f"    sti = sto + ((b * N + n) * T + {row}) * 2", "    x = float32(ST[sti])",
               f"    lse{i} = POS if x == NEG else x", f"    dl{i} = float32(ST[sti + 1])")
    g.zero(1, "dq", g.DN)
    kv = [("k", "kh", "H", KB), ("v", "kh", "HV", VB)]
    g.streamed(1, None, "S", kv, pre="0")
    g.emit(1, f"for c0 in range(0, lim, {BC}):", "    cuda.syncthreads()")
    g.streamed(2, "c0", "S", kv)
    g.prod_rows(2, "s", QB, KB)
    g.prod_rows(2, "p", GB, VB)
    g.entries(2, "c0")   # dS = P (dP - delta)
    g.emit(4, "row = rowA if e < 2 else rowB", "ls = lse0 if e < 2 else lse1",
           "dl = dl0 if e < 2 else dl1", "x = math.exp(s[j, e] * sc - ls)",
           "if col >= S or (causal and col > row):", "    x = float32(0)",
           "s[j, e] = x * (p[j, e] - dl)")
    g.prod_out(2, "dq", "s", KB)
    g.store_bf(1, "dq", [("rowA", 0), ("rowB", 2)], "H", " * sc")


def _stats_regs(g, ind, c):
    """plse, pdl: (lse, delta) of query row c + tid of head n1 (tid < BC; lse +inf where it is
    -inf or the row is past T: probabilities 0), a prefetched step's registers."""
    g.emit(ind, "plse = POS", "pdl = float32(0)", f"if tid < {g.BC} and {c} + tid < T:",
           f"    sti = sto + ((b * N + n1) * T + {c} + tid) * 2", "    x = float32(ST[sti])",
           "    plse = POS if x == NEG else x", "    pdl = float32(ST[sti + 1])")


def _dkv(g):
    """dK, dV partials (float32) of BR key rows over the query heads gs G / GS .. (gs + 1) G /
    GS of their key head, summed head by head, query tile by query tile."""
    BR, BC, RW = g.BR, g.BC, g.RW
    KB, VB, QB = 0, BR * RW, 2 * BR * RW
    GB = QB + BC * RW
    LB = GB + BC * RW
    g.header(["q", "k", "v", "g"], ", ST, sto", "P, po", ", GS, PS")
    g.local(("s", g.NJ), ("p", g.NJ), ("dk", g.DN), ("dv", g.DN))
    g.emit(1, "KH = N // G", "GH = G // GS", "bk = cuda.blockIdx.x", "BK = cuda.gridDim.x // GS",
           "gs = bk // BK", "bk = bk - gs * BK", "b = bk // KH", "kh = bk - b * KH",
           f"row0 = cuda.blockIdx.y * {BR}", f"start = (row0 // {BC}) * {BC} if causal else 0",
           "keyA = row0 + wr0 + g", "keyB = keyA + 8")
    g.load(1, "row0", "S", BR, [("k", "kh", "H", KB), ("v", "kh", "HV", VB)])
    g.zero(1, "dk", g.DN)
    g.zero(1, "dv", g.DN)
    qg = [("q", "n1", "H", QB), ("g", "n1", "HV", GB)]
    # one loop over (query head, query tile); with prefetch, the next step's tile (n1, c1)
    g.emit(1, f"nt = (T - start + {BC - 1}) // {BC}", "n1 = kh * G + gs * GH", "c1 = start")
    pf = BC <= g.NT and g.streamed(1, None, "T", qg, pre="c1")
    if pf:
        _stats_regs(g, 1, "c1")
    g.emit(1, "for it in range(GH * nt):", "    gi = it // nt", "    n = kh * G + gs * GH + gi",
           f"    c0 = start + (it - gi * nt) * {BC}", "    cuda.syncthreads()")
    if pf:
        g.emit(2, "n1 = n + (1 if it - gi * nt == nt - 1 else 0)",
               f"c1 = start if it - gi * nt == nt - 1 else c0 + {BC}",
               "if it == GH * nt - 1:", "    c1 = T")
        g.load(2, "", "T", BC, qg, "store")
        g.emit(2, f"if tid < {BC}:", f"    sf[{LB} + tid] = plse",
               f"    sf[{LB + BC} + tid] = pdl", "cuda.syncthreads()")
        g.load(2, "c1", "T", BC, qg, "issue")
        _stats_regs(g, 2, "c1")
    else:
        g.load(2, "c0", "T", BC, [("q", "n", "H", QB), ("g", "n", "HV", GB)])
        g.emit(2, f"for j in range(tid, {BC}, {g.NT}):", "    tq = c0 + j", "    lse_ = POS",
               "    dl_ = float32(0)", "    if tq < T:",
               "        sti = sto + ((b * N + n) * T + tq) * 2", "        x = float32(ST[sti])",
               "        lse_ = POS if x == NEG else x", "        dl_ = float32(ST[sti + 1])",
               f"    sf[{LB} + j] = lse_", f"    sf[{LB + BC} + j] = dl_", "cuda.syncthreads()")
    g.prod_rows(2, "s", KB, QB)
    g.prod_rows(2, "p", VB, GB)
    g.entries(2, "c0")   # P^T, dS^T (a key sees queries at or after it)
    g.emit(4, "key = keyA if e < 2 else keyB", "li = j * 8 + 2 * t + (e & 1)",
           f"x = math.exp(s[j, e] * sc - sf[{LB} + li])",
           "if causal and col < key:", "    x = float32(0)", "s[j, e] = x",
           f"p[j, e] = x * (p[j, e] - sf[{LB + BC} + li])")
    g.prod_out(2, "dv", "s", GB)
    g.prod_out(2, "dk", "p", QB)
    for key, e0 in (("keyA", 0), ("keyB", 2)):
        g.emit(1, f"if {key} < S:", f"    ob = po + gs * PS + ((b * S + {key}) * KH + kh) * "
               "(H + HV)", f"    for dn in range({g.DN}):", "        d = dn * 8 + 2 * t",
               "        if d < H:", f"            P[uint64(ob + d)] = dk[dn, {e0}] * sc",
               "        if d + 1 < H:",
               f"            P[uint64(ob + d + 1)] = dk[dn, {e0 + 1}] * sc",
               "        if d < HV:", f"            P[uint64(ob + H + d)] = dv[dn, {e0}]",
               "        if d + 1 < HV:",
               f"            P[uint64(ob + H + d + 1)] = dv[dn, {e0 + 1}]")


SUM_SOURCE = """
@cuda.jit(OPTS)
def kernel(P, po, O, ok, ov, rs, hs, K, H, HV, M, GS):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    step = cuda.gridDim.x * cuda.blockDim.x
    W = H + HV
    while i < M:
        acc = P[uint64(po + i)]
        for gg in range(1, GS):
            acc += P[uint64(po + gg * M + i)]
        bsk = i // W
        c = i - bsk * W
        row = bsk // K
        at = row * rs + (bsk - row * K) * hs
        if c < H:
            at += ok + c
        else:
            at += ov + c - H
        O[uint64(at)] = uint16(pack_bf16(acc, float32(0)) & uint32(65535))
        i += step
"""


def _prelude(sim):
    return SIM_SOURCE if sim else ("from funcgrad.cuda.mma import mma_bf16, pack_bf16, u2f\n"
                                   "from funcgrad.cuda.vecmem import ldv4\n"
                                   "from funcgrad.cuda.attention_ld import st4\n")


def sum_source(opts, sim):
    """dkv's partial sum into bf16 dk / dv rows (row stride rs, head stride hs): GS float32
    terms in order, one rounding."""
    return _prelude(sim) + SUM_SOURCE.replace("OPTS", opts)


def source(mode, D, cfg, sim, opts, quad=False):
    """Kernel source for `mode` ('fwd', 'stats', 'dq', 'dkv') at padded head dim D (a multiple
    of 16); quad: q / k / v / do tiles read as 16-byte quads of uint32 pairs (else uint16
    elements)."""
    g = _Gen(mode, D, cfg, sim, quad)
    {"fwd": _fwd, "stats": _stats, "dq": _dq, "dkv": _dkv}[mode](g)
    return _prelude(sim) + "\n".join(g.L).replace("OPTS", opts) + "\n"
