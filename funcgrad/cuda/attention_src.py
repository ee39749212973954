"""Source generator of the flash-attention kernels (forward, stats, dq, dkv): register tiles.

Each block owns BR rows (queries; keys for dkv) of one (batch, head) and streams the other side
through shared memory in tiles of BC. Threads form a TY x TX grid; a thread holds MI = BR / TY
rows and NJ = BC / TX streamed columns of every score tile, and output columns tx + TX*k
(k < D/TX) of its rows, all in scalar registers. Every product is a small GEMM from shared
memory: each k-step loads MI + NJ values for MI*NJ FMAs. Tiles live in shared memory transposed
([head dim][row]). By default a thread's rows are ty + TY*i and its columns tx + TX*j, with row
stride R + 1, so row reads, column reads and the coalesced loads from global memory are all free
of bank conflicts. VEC configurations give a thread contiguous rows ty*MI + i and columns
tx*NJ + j over rows padded to R + 4 words (16-byte aligned), read as float4 / float2 loads
(attention_ld.ld4 / ld2: NVVM merged scalar reads only outside the loops, where it could prove
their alignment); their tile loads map a warp onto 8 head dims x 4 rows so the transposed stores
stay conflict-free. U sets the global loads in flight per operand; PF prefetches the next
streamed tile into registers while the current one is multiplied; MB (> 0) asks for MB blocks
per SM (launch bounds: ptxas caps registers); UK (> 1) runs the product loops UK steps per
iteration (lengths rounded up to a multiple of UK: every tile is zero past its lengths), so the
loads of UK steps are in flight together. Only the tile constants (BR, BC, TY, TX, VEC, U, PF,
MB, UK) and the padded head dim D (a power of two; outputs in registers) are baked in; head
dims, lengths, strides and causality are runtime arguments, so loops stay loops and a kernel
compiles in about two seconds. Row max/sum across a row's TX
lanes use warp shuffles (shared memory under the simulator); all orders are fixed, so results
are deterministic. The merged backward ('bwd': dkv plus each key tile's dQ partial, summed by
'dqsum') calls its five products through two device functions that numba types once and NVVM
inlines: 2.6-2.9 s to compile instead of 3.6-4.1 s with the loops written out.

The forward's VEC 2 layout (_fwd2, the default at W2's shapes) is built for the shared-memory
pipe, which serves one 128-byte wavefront a cycle per SM: VEC 0's k-step issues MI + NJ scalar
loads for MI * NJ FMAs (6 for 8 at the old default: the kernel waited on shared memory and spent
70% of its issue slots on other instructions), VEC 2 one float4 load per four rows or columns,
each a single broadcast wavefront per warp. Q^T, K^T and P^T are stored [k][row] and V row-major,
all at row stride + 4 words; K / V elements are fetched in Gray-code order of the thread's
element index, so each 64-bit index is the previous one plus one hoisted stride step; the
softmax runs in base 2 with log2(e) folded into the scale. H200, 2026-11-25, W2 (B16 N6 T256 H64
causal), fwdl: 49.9 us at (64, 32, 16, 8, 2, 8, 1, 0, 4) (163 registers, 3 blocks an SM)
against 72.0 us for VEC 0's (64, 32, 32, 8, 0, 8, 1) in the same process.

The merged backward's VEC layouts (cb) run its three score-tile products (dV += P^T dO,
dK += dS^T Q, dQ partial = dS K) four reduction steps at a time (mm_ci / mm_cc): both operands
are contiguous along the reduction in shared memory, so (MI + OC) float4 loads feed 4 MI OC FMAs
(mm_so1 / mm_so: 4 (1 + OC) and 4 (MI + OC) loads); P^T and dS^T are stored as float4s; the
query rows' statistics load beside their tile; with PF the next Q / dO tile is fetched in Gray
order (the forward's _Tile, one device function for both operands and both call sites) during
the products. The products alone did not move it (125.9 against 126.6 us: the shared pipe was
not what bound it); hiding the global loads did: H200, 2026-11-25, W2, bwd 126.1 -> 101.9 us at
(32, 32, 8, 16, 1, 8, 1, 4, 4) (launch bounds cap 128 registers: 4 blocks an SM, no spills).
delta's VEC 2 form (_delta2) reads o and do straight from global memory: 8.5 -> 4.9 us.
"""
from __future__ import annotations

import math

from .elementwise import compute_t, nbt

SMEM_WORDS_BYTES = 48 * 1024
# (BR, BC, TY, TX[, VEC, U[, PF[, MB[, UK]]]]) in order of preference; the first whose shared
# memory fits is used. VEC 1: contiguous register tiles (rows ty * MI + i, columns tx * NJ + j)
# over tiles padded to a multiple of four words, so the GEMM loops read float4s; VEC 2: fwd and
# fwdl _fwd2's layout, delta _delta2 (no shared memory), bwd VEC 1 with V^T unpadded and the
# query statistics in P^T's padding (5 blocks an SM at W2: slower), other modes VEC 1; U: global
# loads in flight per operand (VEC 2 forward: the whole tile); PF, MB, UK: the module docstring
GPU_CONFIGS = {   # the first of each: fastest at W2's shapes on an H200 (bench_attention_simt)
    "fwd": [(64, 32, 16, 8, 2, 8, 1, 0, 4), (64, 32, 32, 8, 0, 8, 1), (64, 32, 16, 8),
            (32, 32, 8, 8), (16, 16, 8, 8), (8, 8, 4, 4)],
    "stats": [(64, 32, 16, 8), (32, 32, 8, 8), (16, 16, 8, 8), (8, 8, 4, 4)],
    "delta": [(32, 32, 16, 16, 2, 0), (64, 32, 32, 8, 0, 8), (64, 32, 16, 8), (32, 32, 8, 8),
              (16, 16, 8, 8), (8, 8, 4, 4)],
    "dq": [(32, 32, 8, 16, 0, 8), (32, 32, 8, 8), (16, 16, 8, 8), (8, 8, 4, 4)],
    "dkv": [(32, 32, 16, 8, 1, 8), (32, 32, 8, 8), (16, 16, 8, 8), (8, 8, 4, 4)],
    # the merged backward (dkv's work plus the dQ partials dS K); BR == BC
    "bwd": [(32, 32, 8, 16, 1, 8, 1, 4, 4), (32, 32, 8, 8), (16, 16, 8, 8), (8, 8, 4, 4)],
}
GPU_CONFIGS["fwdl"] = GPU_CONFIGS["fwd"]       # the forward that also writes the logsumexp
SIM_CONFIG = (4, 4, 2, 2)   # the simulator: 4 threads, 2 x 2 registers, every path on tiny shapes


def full_config(cfg):
    """(BR, BC, TY, TX, VEC, U, PF, MB, UK) of a 4- or 6- to 9-tuple configuration."""
    return tuple(cfg) + (0, 4, 0, 0, 1)[len(cfg) - 4:]


def smem_words(mode, D, BR, BC, pad=1):
    """Shared-memory words of one block (tiles, score scratch, per-query stats); tile rows are
    padded by `pad` words (1, or 4 for VEC configurations)."""
    rows, cols, sc = D * (BR + pad), D * (BC + pad), BC * (BR + pad)
    return {"fwd": rows + max(cols, sc) + cols, "fwdl": rows + max(cols, sc) + cols,
            "stats": rows + max(cols, rows), "delta": 2 * rows,
            "dq": 2 * rows + cols + max(cols, sc),
            "dkv": 2 * rows + 2 * cols + 2 * sc + 2 * BC,
            "bwd": 2 * rows + 2 * cols + 2 * sc + 2 * BC}[mode]


def fwd2_words(D, BR, BC):
    """Shared-memory words of the VEC 2 forward: Q^T, K^T, V (row-major) and P^T tiles."""
    return D * (BR + 4) + D * (BC + 4) + BC * (D + 4) + BC * (BR + 4)


def bwd_words(D, BR, BC):
    """Shared-memory words of the merged backward's VEC layout (_dkv's cb): K^T, V^T (rows
    unpadded), Q^T, dO^T, P^T and dS^T tiles; the query statistics in P^T's row padding."""
    return D * (BR + 4) + D * BR + 2 * D * (BC + 4) + 2 * BC * (BR + 4)


def config_words(mode, D, cfg):
    """Shared-memory words of `cfg` (any configuration tuple) for `mode` at head dim D."""
    BR, BC, _, _, vec = full_config(cfg)[:5]
    if vec == 2 and mode in ("fwd", "fwdl"):
        return fwd2_words(D, BR, BC)
    if vec == 2 and mode == "delta":   # _delta2: no shared memory
        return 0
    if vec == 2 and mode == "bwd" and BR == BC and BR % 4 == 0:
        return bwd_words(D, BR, BC)
    return smem_words(mode, D, BR, BC, 4 if vec else 1)


def pick_config(mode, D, itemsize, sim):
    """The configuration tuple for `mode` at padded head dim D."""
    if sim:
        return SIM_CONFIG
    for cfg in GPU_CONFIGS[mode]:
        if config_words(mode, D, cfg) * itemsize <= SMEM_WORDS_BYTES:
            return cfg
    raise ValueError(f"attention: head dim {D} does not fit shared memory")


def _operand(name):
    return f"{name.upper()}a, {name}o, {name}s0, {name}s1, {name}s2, {name}s3"


class _Gen:
    def __init__(self, mode, dtype, st_dtype, D, cfg, sim):
        self.mode, self.D, self.sim = mode, D, sim
        (self.BR, self.BC, self.TY, self.TX, self.vec, self.U, self.PF, self.MB,
         self.UK) = full_config(cfg)
        self.MI, self.NJ = self.BR // self.TY, self.BC // self.TX
        if self.BR % self.UK or self.BC % self.UK or D % self.UK:
            raise ValueError(f"attention: UK {self.UK} does not divide the tiles of {cfg}, {D}")
        self.OC = D // self.TX
        self.NT = self.TY * self.TX
        self.P = 4 if self.vec else 1   # tile row padding (words)
        self.ct, self.out = compute_t(dtype), nbt(dtype)
        self.st_out = nbt(st_dtype)
        self.L: list[str] = []
        self.fn = False   # products as calls of device functions (typed once: faster compile)
        self.cb = False   # fn: the score-tile products four c a step (mm_ci / mm_cc)

    def row(self, i):
        """This thread's i-th row of a tile (an expression)."""
        return f"ty * {self.MI} + {i}" if self.vec else f"ty + {i} * {self.TY}"

    def col(self, j):
        """This thread's j-th streamed column of a score tile (an expression)."""
        return f"tx * {self.NJ} + {j}" if self.vec else f"tx + {j} * {self.TX}"

    def emit(self, ind, *lines):
        self.L += [("    " * ind) + x for x in lines]

    def kloop(self, ind, var, klen, body):
        """for var in range(klen): body; UK > 1: UK steps per iteration (klen rounded up to a
        multiple of UK: the tiles past every length are zero)."""
        if self.UK == 1:
            self.emit(ind, f"for {var} in range({klen}):", *("    " + x for x in body))
        elif isinstance(klen, int):   # (var unused: a unit-step count, a simpler loop)
            self.emit(ind, f"for {var} in range({-(-klen // self.UK)}):",
                      f"    for u_ in range({self.UK}):", *("        " + x for x in body))
        else:
            self.emit(ind, f"for {var} in range(0, {klen}, {self.UK}):",
                      f"    for u_ in range({self.UK}):", *("        " + x for x in body))

    def vloads(self, dst, n, ptr):
        """Lines dst[i] = sm[ptr + i] for i < n: float4 / float2 loads (attention_ld) in VEC
        configurations on the GPU (ptr a multiple of 4 / 2 words), scalar loads otherwise."""
        w = 4 if n % 4 == 0 else 2 if n % 2 == 0 else 1
        if not self.vec or self.sim or w == 1:
            return [f"for i in range({n}):", f"    {dst}[i] = sm[{ptr} + uint64(i)]"]
        out = []
        for i0 in range(0, n, w):
            names = ", ".join(f"{dst}[{i0 + i}]" for i in range(w))
            out.append(f"{names} = ld{w}(sm, {ptr}{f' + uint64({i0})' if i0 else ''})")
        return out

    def tile_index(self, ind, R):
        """r, d of tile element i. VEC: a warp covers 8 dims x 4 rows, so the transposed
        stores below hit 32 banks (row stride R + 4) and global reads stay 32-byte sectors."""
        D = self.D
        if not self.vec:
            self.emit(ind, f"r = i // {D}", f"d = i - r * {D}")
            return
        dl = math.gcd(D, 8)
        rl = math.gcd(R, 32 // dl)
        self.emit(ind, f"h_ = i // {dl * rl}", f"r = (h_ // {D // dl}) * {rl} + (i // {dl}) % {rl}",
                  f"d = (h_ % {D // dl}) * {dl} + i % {dl}")

    def load_tile(self, ind, r0, limit, R, ops, part="both"):
        """For each (op, head, width, base) of ops: sm[base + d * (R + P) + r] =
        op[b, r0 + r, head, d] (0 outside [0, limit) x [0, width)) for r < R, d < D.
        Consecutive threads read consecutive d; U loads per operand in flight. part 'fetch'
        only loads the whole tile into registers (xl), 'put' only stores them."""
        D, NT, ct = self.D, self.NT, self.ct
        total = R * D
        U = self.U if part == "both" else -(-total // NT)
        tail = total % (NT * U) != 0
        if part == "both":
            self.emit(ind, f"for i0 in range(tid, {total}, {NT * U}):")
            ind += 1
        else:
            self.emit(ind, "i0 = tid")
        if part != "put":
            self.emit(ind, f"for u in range({U}):", f"    i = i0 + u * {NT}")
            self.tile_index(ind + 1, R)
            self.emit(ind + 1, f"rr = {r0} + r",
                      f"ok = {f'i < {total} and ' if tail else ''}rr < {limit}")
            for n_, (op, head, width, *_) in enumerate(ops):
                self.emit(ind + 1, f"x = {ct}(0)", f"if ok and d < {width}:",
                          f"    x = {ct}({op.upper()}a[uint64({op}o + b * {op}s0 + rr * {op}s1 + "
                          f"{head} * {op}s2 + d * {op}s3)])", f"xl[u + {U * n_}] = x")
        if part == "fetch":
            return
        self.emit(ind, f"for u in range({U}):", f"    i = i0 + u * {NT}")
        self.tile_index(ind + 1, R)
        self.emit(ind + 1, f"a_ = d * {R + self.P} + r")
        pre = ""
        if tail:
            self.emit(ind + 1, f"if i < {total}:")
            pre = "    "
        for n_, (_, _, _, base, *rs) in enumerate(ops):   # rs: a row stride other than R + P
            at = f"d * {rs[0]} + r" if rs else "a_"
            self.emit(ind + 1, f"{pre}sm[uint64({base} + {at})] = xl[u + {U * n_}]")

    def stream(self, ind, start, end, limit, ops, pre=()):
        """for c0 in range(start, end, BC), the tile of ops at rows c0 stored in shared memory
        (PF: loaded into registers before, during the previous tile's products); pre: lines
        run first in each iteration (loads issued beside the tile's)."""
        if not self.PF:
            self.emit(ind, f"for c0 in range({start}, {end}, {self.BC}):", *pre)
            self.load_tile(ind + 1, "c0", limit, self.BC, ops)
            return
        self.emit(ind, f"if {start} < {end}:")
        self.load_tile(ind + 1, start, limit, self.BC, ops, "fetch")
        self.emit(ind, f"for c0 in range({start}, {end}, {self.BC}):", *pre)
        self.load_tile(ind + 1, "c0", limit, self.BC, ops, "put")

    def prefetch(self, ind, end, limit, ops):
        """PF: the next streamed tile's loads, issued once this one is in shared memory."""
        if self.PF:
            self.emit(ind, f"if c0 + {self.BC} < {end}:")
            self.load_tile(ind + 1, f"(c0 + {self.BC})", limit, self.BC, ops, "fetch")

    def mm_rows_cols(self, ind, acc, abase, AR, bbase, BR_, klen):
        """acc[i, j] = sum_k A[k][row(i)] * B[k][col(j)] (tiles [k][row], stride + P)."""
        MI, NJ, ct, P = self.MI, self.NJ, self.ct, self.P
        if self.fn:
            self.emit(ind, f"mm_rc(sm, {acc}, av, bv, uint64({abase} + {self.row(0)}), "
                      f"uint64({bbase} + {self.col(0)}), {klen}, uint64({AR + P}), "
                      f"uint64({BR_ + P}))")
            return
        self.emit(ind, f"for i in range({MI}):", f"    for j in range({NJ}):",
                  f"        {acc}[i, j] = {ct}(0)",
                  f"pa = uint64({abase} + {self.row(0)})", f"pb = uint64({bbase} + {self.col(0)})")
        self.kloop(ind, "kk", klen, self.rc_body(acc, f"uint64({AR + P})", f"uint64({BR_ + P})"))

    def rc_body(self, acc, sa, sb):
        """One k-step of mm_rows_cols: this thread's rows of A and columns of B, MI x NJ FMAs."""
        MI, NJ = self.MI, self.NJ
        ri, cj = (1, 1) if self.vec else (self.TY, self.TX)
        if self.vec:
            loads = self.vloads("av", MI, "pa") + self.vloads("bv", NJ, "pb")
        else:
            loads = [f"for i in range({MI}):", f"    av[i] = sm[pa + uint64(i * {ri})]",
                     f"for j in range({NJ}):", f"    bv[j] = sm[pb + uint64(j * {cj})]"]
        return loads + [f"for i in range({MI}):", f"    for j in range({NJ}):",
                        f"        {acc}[i, j] += av[i] * bv[j]", f"pa += {sa}", f"pb += {sb}"]

    def mm_scores_out(self, ind, pairs, klen):
        """For each (acc, sbase, obase, OR): acc[i, k] += sum_c S[c][row(i)] *
        O[tx + TX k][c] (S stored [c][row] with stride BR + P, O [col][c] stride OR + P)."""
        MI, OC, TY, TX, BR, P = self.MI, self.OC, self.TY, self.TX, self.BR, self.P
        ri = 1 if self.vec else TY
        if self.fn:
            for acc, sbase, obase, OR in pairs:
                self.so_call(ind, acc, f"{sbase} + {self.row(0)}", ri, BR + P, obase, OR, klen)
            return
        for n_, (_, sbase, obase, OR) in enumerate(pairs):
            self.emit(ind, f"ps{n_} = uint64({sbase} + {self.row(0)})",
                      f"po{n_} = uint64({obase} + tx * {OR + P})")
        body = []
        for n_, (acc, _, _, OR) in enumerate(pairs):
            if self.vec:
                body += self.vloads("av", MI, f"ps{n_}")
            else:
                body += [f"for i in range({MI}):", f"    av[i] = sm[ps{n_} + uint64(i * {ri})]"]
            body += [f"for k in range({OC}):",
                     f"    wv[k] = sm[po{n_} + uint64(k * {TX * (OR + P)})]"]
            body += [f"for i in range({MI}):", f"    for k in range({OC}):",
                     f"        {acc}[i, k] += av[i] * wv[k]", f"ps{n_} += uint64({BR + P})",
                     f"po{n_} += uint64(1)"]
        self.kloop(ind, "c", klen, body)

    def so_call(self, ind, acc, first, s_i, s_c, obase, OR, klen):
        """acc[i, k] += sum_{c < klen} S(c, i) O[tx + TX k][c], S(c, i) at first + i s_i + c s_c
        (the device function mm_so; cb: mm_ci / mm_cc, four c a step)."""
        P, TX = self.P, self.TX
        if self.cb:
            f, st = ("mm_ci", s_c) if s_i == 1 else ("mm_cc", s_i)
            self.emit(ind, f"{f}(sm, {acc}, a4, b4, uint64({first}), uint64({st}), "
                      f"uint64({obase} + tx * {OR + P}), uint64({TX * (OR + P)}), {klen})")
            return
        if self.vec and s_i == 1:
            self.emit(ind, f"mm_so1(sm, {acc}, av, wv, uint64({first}), uint64({s_c}), "
                      f"uint64({obase} + tx * {OR + P}), uint64({TX * (OR + P)}), {klen})")
            return
        self.emit(ind, f"mm_so(sm, {acc}, av, wv, uint64({first}), uint64({s_i}), "
                  f"uint64({s_c}), uint64({obase} + tx * {OR + P}), uint64({TX * (OR + P)}), "
                  f"{klen})")

    def device_fns(self):
        """The products as device functions (fn): numba types each body once, NVVM inlines."""
        MI, NJ, OC, ct = self.MI, self.NJ, self.OC, self.ct
        dev = "@cuda.jit(device=True, OPTS)"
        self.emit(0, "", dev, "def mm_rc(sm, acc, av, bv, pa, pb, klen, sa, sb):")
        self.emit(1, f"for i in range({MI}):", f"    for j in range({NJ}):",
                  f"        acc[i, j] = {ct}(0)")
        self.kloop(1, "kk", "klen", self.rc_body("acc", "sa", "sb"))
        tail = [f"for k in range({OC}):", "    wv[k] = sm[po + uint64(k) * ow]",
                f"for i in range({MI}):", f"    for k in range({OC}):",
                "        acc[i, k] += av[i] * wv[k]", "ps += s_c", "po += uint64(1)"]
        self.emit(0, "", dev, "def mm_so(sm, acc, av, wv, ps, s_i, s_c, po, ow, klen):")
        self.kloop(1, "c", "klen", [f"for i in range({MI}):",
                                    "    av[i] = sm[ps + uint64(i) * s_i]"] + tail)
        if self.vec:   # rows contiguous (s_i = 1): vector loads
            self.emit(0, "", dev, "def mm_so1(sm, acc, av, wv, ps, s_c, po, ow, klen):")
            self.kloop(1, "c", "klen", self.vloads("av", MI, "ps") + tail)
        if self.cb:
            for name, rows in (("mm_ci", True), ("mm_cc", False)):
                self.emit(0, "", dev, f"def {name}(sm, acc, a4, b4, pa, sa, pb, sb, klen):")
                self.emit(1, "for c0 in range(0, klen, 4):")
                self.emit(2, *self.cb_body(rows))

    def cb_body(self, rows):
        """Four c-steps of acc[i, k] += A(i, c) B(k, c), B(k, c) at pb + k sb + c (the rows of O
        over c: one float4 a column k); rows: A(i, c) at pa + c sa + i (one float4 per c and
        four rows), else at pa + i sa + c (one float4 per row). (MI + OC) float4 loads for
        4 MI OC FMAs where mm_so1 reads 4 (1 + OC) vectors and scalars."""
        MI, OC = self.MI, self.OC
        if self.sim:
            a = "pa + uint64(c) * sa + uint64(i)" if rows else "pa + uint64(i) * sa + uint64(c)"
            out = [f"for k in range({OC}):", "    for c in range(4):",
                   "        b4[k, c] = sm[pb + uint64(k) * sb + uint64(c)]",
                   f"for i in range({MI}):", "    for c in range(4):", f"        a4[i, c] = sm[{a}]"]
        else:
            out = [f"for k in range({OC}):",
                   "    b4[k, 0], b4[k, 1], b4[k, 2], b4[k, 3] = ld4(sm, pb + uint64(k) * sb)"]
            if rows:
                w = 4 if MI % 4 == 0 else 2 if MI % 2 == 0 else 1
                out.append("for c in range(4):")
                for i0 in range(0, MI, w):
                    names = ", ".join(f"a4[{i0 + i}, c]" for i in range(w))
                    at = f"pa + uint64(c) * sa{f' + uint64({i0})' if i0 else ''}"
                    out.append(f"    {names} = " + (f"ld{w}(sm, {at})" if w > 1 else f"sm[{at}]"))
            else:
                out += [f"for i in range({MI}):",
                        "    a4[i, 0], a4[i, 1], a4[i, 2], a4[i, 3] = ld4(sm, pa + uint64(i) * sa)"]
        return out + ["for c in range(4):", f"    for i in range({MI}):",
                      f"        for k in range({OC}):", "            acc[i, k] += a4[i, c] * b4[k, c]",
                      f"pa += {'sa * uint64(4)' if rows else 'uint64(4)'}", "pb += uint64(4)"]

    def group(self, ind, var, op):
        """var <- the max / sum of var over the TX lanes of this thread's row group."""
        comb = (lambda a, b: f"max({a}, {b})") if op == "max" else (lambda a, b: f"{a} + {b}")
        if not self.sim:
            off = self.TX // 2
            while off:
                self.emit(ind, f"{var} = "
                          f"{comb(var, f'cuda.shfl_xor_sync(0xffffffff, {var}, {off})')}")
                off //= 2
            return
        self.emit(ind, f"red[tid] = {var}", "cuda.syncthreads()", "v_ = red[tid - tx]",
                  f"for u in range(1, {self.TX}):", f"    v_ = {comb('v_', 'red[tid - tx + u]')}",
                  "cuda.syncthreads()", f"{var} = v_")

    def local(self, name, *shape):
        self.emit(1, f"{name} = cuda.local.array({shape if len(shape) > 1 else shape[0]}, "
                  f"{self.ct})")

    def header(self, ops, extra, out, out_extra=""):
        ct, D = self.ct, self.D
        words = config_words(self.mode, self.D, (self.BR, self.BC, 0, 0, self.vec))
        align = ", alignment=16" if self.vec and not self.sim else ""
        if self.vec and not self.sim:
            self.L.insert(0, "from funcgrad.cuda.attention_ld import ld2, ld4, st2, st4")
        bounds = f", launch_bounds=({self.NT}, {self.MB})" if self.MB and not self.sim else ""
        self.emit(0, "", f"@cuda.jit(OPTS{bounds})",
                  f"def kernel({', '.join(_operand(x) for x in ops)}{extra}, {out}, outo"
                  f"{out_extra}, T, S, N, G, H, HV, causal, scale_):")
        self.emit(1, f"sm = cuda.shared.array({words}, {ct}{align})")
        if self.sim:
            self.emit(1, f"red = cuda.shared.array({self.NT}, {ct})")
        self.emit(1, "tid = cuda.threadIdx.x", f"ty = tid // {self.TX}",
                  f"tx = tid - ty * {self.TX}", f"sc = {ct}(scale_)", f"NEG = {ct}(-math.inf)",
                  f"POS = {ct}(math.inf)")
        whole = -(-max(self.BR, self.BC) * D // self.NT) if self.PF else 0
        if self.vec == 2 and self.mode in ("fwd", "fwdl"):   # _fwd2: the Q tile, or K and V
            whole, self.U = -(-self.BR * D // self.NT), -(-self.BC * D // self.NT)
        self.local("xl", 2 * max(self.U, whole))
        self.local("av", self.MI)
        self.local("bv", self.NJ)
        self.local("wv", self.OC)
        if self.cb:
            self.local("a4", self.MI, 4)
            self.local("b4", self.OC, 4)


def _query_rows(g):
    """Prologue of the query-row kernels: the row tile (heaviest causal tiles first)."""
    g.emit(1, "bn = cuda.blockIdx.x", "b = bn // N", "n = bn - b * N", "kh = n // G",
           f"row0 = (cuda.gridDim.y - 1 - cuda.blockIdx.y) * {g.BR}",
           f"lim = min(S, row0 + {g.BR}) if causal else S")


def _zero(g, ind, name, n1, n2):
    g.emit(ind, f"for i in range({n1}):", f"    for j in range({n2}):",
           f"        {name}[i, j] = {g.ct}(0)")


def _store_scores(g, ind, base, var, expr=None):
    """sm[base + col * (BR + P) + row] = var[i, j] (the score tile, transposed)."""
    g.emit(ind, f"for i in range({g.MI}):", f"    for j in range({g.NJ}):",
           f"        sm[uint64({base} + ({g.col('j')}) * {g.BR + g.P} + {g.row('i')})] = "
           f"{expr or var + '[i, j]'}")


def _fwd_like(g, stats, lse_out=False, lse_in=False):
    """The forward (stats=False; lse_out: also L[b, n, t] = the rows' logsumexp) or the
    backward statistics (stats=True; lse_in: the logsumexp read from L, no q.k pass)."""
    D, BR, BC, MI, NJ, OC, TX, ct = (g.D, g.BR, g.BC, g.MI, g.NJ, g.OC, g.TX, g.ct)
    P = g.P
    QB, KB = 0, D * (BR + P)
    VB = KB + max(D * (BC + P), BC * (BR + P))
    ops = (["o", "g"] if lse_in else ["q", "k", "o", "g"]) if stats else ["q", "k", "v"]
    g.header(ops, ", La, lo" if lse_out or lse_in else "", "ST" if stats else "O")
    g.local("s", MI, NJ)
    g.local("m", MI)
    g.local("l", MI)
    _query_rows(g)
    if stats:   # delta = sum(o * do) over the value dims: both row tiles through shared memory
        g.local("dsum", MI)
        g.load_tile(1, "row0", "T", BR, [("o", "n", "HV", QB), ("g", "n", "HV", KB)])
        g.emit(1, "cuda.syncthreads()", f"for i in range({MI}):", f"    x = {ct}(0)",
               f"    for k in range({OC}):",
               f"        a_ = uint64((tx + k * {TX}) * {BR + P} + {g.row('i')})",
               f"        x += sm[a_] * sm[a_ + uint64({KB})]")
        g.group(2, "x", "sum")
        g.emit(2, "dsum[i] = x")
        g.emit(1, "cuda.syncthreads()")
    if lse_in:
        g.emit(1, f"for i in range({MI}):", f"    t = row0 + {g.row('i')}",
               "    if t < T and tx == 0:", "        sti = outo + ((b * N + n) * T + t) * 2",
               f"        ST[sti] = {g.st_out}(La[uint64(lo + (b * N + n) * T + t)])",
               f"        ST[sti + 1] = {g.st_out}(dsum[i])")
        return
    g.load_tile(1, "row0", "T", BR, [("q", "n", "H", QB)])
    g.emit(1, f"for i in range({MI}):", "    m[i] = NEG", f"    l[i] = {ct}(0)")
    if not stats:
        g.local("o", MI, OC)
        _zero(g, 1, "o", MI, OC)
    kv = [("k", "kh", "H", KB)] + ([] if stats else [("v", "kh", "HV", VB)])
    g.stream(1, "0", "lim", "S", kv)
    g.emit(2, "cuda.syncthreads()")
    g.prefetch(2, "lim", "S", kv)
    g.mm_rows_cols(2, "s", QB, BR, KB, BC, "H")
    # online softmax: row max over the row's lanes, rescale the running sums / outputs
    g.emit(2, f"for i in range({MI}):", f"    row = row0 + {g.row('i')}", "    mx = NEG",
           f"    for j in range({NJ}):", f"        col = c0 + {g.col('j')}",
           "        x = s[i, j] * sc", "        if col >= S or (causal and col > row):",
           "            x = NEG", "        s[i, j] = x", "        mx = max(mx, x)")
    g.group(3, "mx", "max")
    g.emit(3, "mn = max(m[i], mx)", f"mu = mn if mn > NEG else {ct}(0)",
           "al = math.exp(m[i] - mu)", "m[i] = mn", f"ls = {ct}(0)",
           f"for j in range({NJ}):", "    x = math.exp(s[i, j] - mu)", "    s[i, j] = x",
           "    ls += x", "l[i] = l[i] * al + ls")
    if not stats:
        g.emit(3, f"for k in range({OC}):", "    o[i, k] *= al")
    g.emit(2, "cuda.syncthreads()")
    if not stats:   # P (transposed) over the K tile, then O += P V
        _store_scores(g, 2, KB, "s")
        g.emit(2, "cuda.syncthreads()")
        g.mm_scores_out(2, [("o", KB, VB, BC)], f"min({BC}, lim - c0)")
        g.emit(2, "cuda.syncthreads()")
    g.emit(1, f"for i in range({MI}):", "    li = l[i]")
    g.group(2, "li", "sum")
    g.emit(2, f"t = row0 + {g.row('i')}")
    if stats:
        g.emit(2, "if t < T and tx == 0:", "    sti = outo + ((b * N + n) * T + t) * 2",
               f"    ST[sti] = {g.st_out}(m[i] + math.log(li)) if li > 0 else {g.st_out}(NEG)",
               f"    ST[sti + 1] = {g.st_out}(dsum[i])")
        return
    if lse_out:
        g.emit(2, "if t < T and tx == 0:",
               f"    La[uint64(lo + (b * N + n) * T + t)] = {g.out}(m[i] + math.log(li)) "
               f"if li > 0 else {g.out}(NEG)")
    g.emit(2, f"inv = {ct}(1) / li if li > 0 else {ct}(0)", "if t < T:",
           "    ob = outo + ((b * T + t) * N + n) * HV", f"    for k in range({OC}):",
           f"        e = tx + k * {TX}", "        if e < HV:",
           f"            O[uint64(ob + e)] = {g.out}(o[i, k] * inv)")


def _tile_map(D, R, transposed):
    """i -> (r, d) of a tile of R rows x D dims: transposed ([d][r] in shared memory) a warp
    covers dl dims x rl rows (conflict-free stores at row stride R + 4, 32-byte global
    sectors); otherwise consecutive i are consecutive d. Returns (python function, expression
    builder)."""
    if not transposed:
        return (lambda i: (i // D, i % D)), (lambda i: (f"({i}) // {D}", f"({i}) % {D}"))
    dl = math.gcd(D, 8)
    rl = math.gcd(R, 32 // dl)
    nd = D // dl

    def f(i):
        h = i // (dl * rl)
        return (h // nd) * rl + (i // dl) % rl, (h % nd) * dl + i % dl
    return f, (lambda i: (f"(({i}) // {dl * rl} // {nd}) * {rl} + (({i}) // {dl}) % {rl}",
                          f"((({i}) // {dl * rl}) % {nd}) * {dl} + ({i}) % {dl}"))


class _Tile:
    """One tile operand of the VEC 2 forward: rows R x dims D, element i = tid + NT u of a
    thread at (r, d); where the map splits over tid and u (powers of two), the thread's part
    is computed once (names r_<n>, d_<n>) and each u adds constants."""

    def __init__(self, g, name, R, transposed):
        self.g, self.name, self.R = g, name, R
        self.total = R * g.D
        self.U = -(-self.total // g.NT)
        self.f, self.e = _tile_map(g.D, R, transposed)
        self.fn = False   # fetch through the device function fetch_<name> (fetch_fn)
        NT = g.NT
        self.split = all(
            self.f(t + NT * u) == tuple(a + b for a, b in zip(self.f(t), self.f(NT * u)))
            for t in range(NT) for u in range(self.U) if t + NT * u < self.total)

    def prologue(self, ind):
        if self.split:
            r, d = self.e("tid")
            self.g.emit(ind, f"r_{self.name} = {r}", f"d_{self.name} = {d}")

    def rd(self, ind):
        """Lines setting r, d of element u (loop variable u)."""
        if self.split:
            r, d = self.e(f"{self.g.NT} * u")
            self.g.emit(ind, f"r = r_{self.name} + {r}", f"d = d_{self.name} + {d}")
        else:
            r, d = self.e(f"tid + {self.g.NT} * u")
            self.g.emit(ind, f"r = {r}", f"d = {d}")

    def fetch(self, ind, r0, limit, op, head, width, base, xo):
        """xl[xo + u] = op[b, r0 + r, head, d] (0 outside [0, limit) x [0, width))."""
        g, ct = self.g, self.g.ct
        tail = self.total % g.NT != 0
        if self.split:   # one 64-bit index, moved by one stride step an element (Gray order)
            self.fetch_gray(ind, r0, limit, op, width, xo)
            return
        g.emit(ind, f"for u in range({self.U}):")
        self.rd(ind + 1)
        g.emit(ind + 1, f"rr = {r0} + r", f"x = {ct}(0)",
               f"if {f'tid + {g.NT} * u < {self.total} and ' if tail else ''}rr < {limit} "
               f"and d < {width}:",
               f"    x = {ct}({op.upper()}a[uint64({op}b_ + rr * {op}s1 + d * {op}s3)])",
               f"xl[{xo} + u] = x")

    def fetch_gray(self, ind, r0, limit, op, width, xo):
        """fetch of a split map: elements in Gray-code order of u, so each index is the last
        one plus or minus one stride step (the map's r and d at one bit of u, constants after
        unrolling: one 64-bit add an element)."""
        g, ct, nm, NT, U = self.g, self.g.ct, self.name, self.g.NT, self.U
        n = 1 << max(0, (U - 1).bit_length())
        r, d = self.e(f"{NT} * u")
        rv, dv = self.e(f"{NT} * v")
        g.emit(ind, f"p_ = {op}b_ + ({r0} + r_{nm}) * {op}s1 + d_{nm} * {op}s3",
               f"nr_ = int32(min({limit} - ({r0}) - r_{nm}, {self.R}))",
               f"nd_ = int32(min({width} - d_{nm}, {g.D}))")
        if self.fn:
            g.emit(ind, f"fetch_{nm}({op.upper()}a, xl, p_, {op}s1, {op}s3, nr_, nd_, {xo})")
            return
        g.emit(ind, f"for n_ in range({n}):", "    u = n_ ^ (n_ >> 1)",
               "    v = (n_ - 1) ^ ((n_ - 1) >> 1)",
               f"    p_ += ({r} - ({rv})) * {op}s1 + ({d} - ({dv})) * {op}s3",
               f"    if u < {U}:", f"        x = {ct}(0)",
               f"        if {r} < nr_ and {d} < nd_:",
               f"            x = {ct}({op.upper()}a[uint64(p_)])",
               f"        xl[{xo} + u] = x")

    def fetch_fn(self):
        """fetch_gray's loop as the device function fetch_<name> (typed once, inlined by
        NVVM: one body however many operands and call sites share this map)."""
        g, ct, NT, U = self.g, self.g.ct, self.g.NT, self.U
        n = 1 << max(0, (U - 1).bit_length())
        r, d = self.e(f"{NT} * u")
        rv, dv = self.e(f"{NT} * v")
        g.emit(0, "", "@cuda.jit(device=True, OPTS)",
               f"def fetch_{self.name}(A, xl, p_, s1, s3, nr_, nd_, xo):",
               f"    for n_ in range({n}):", "        u = n_ ^ (n_ >> 1)",
               "        v = (n_ - 1) ^ ((n_ - 1) >> 1)",
               f"        p_ += ({r} - ({rv})) * s1 + ({d} - ({dv})) * s3",
               f"        if u < {U}:", f"            x = {ct}(0)",
               f"            if {r} < nr_ and {d} < nd_:",
               f"                x = {ct}(A[uint64(p_)])",
               "            xl[xo + u] = x")
        self.fn = True

    def put(self, ind, addr, xo):
        """sm[addr(r, d)] = xl[xo + u]."""
        g = self.g
        tail = self.total % g.NT != 0
        g.emit(ind, f"for u in range({self.U}):")
        self.rd(ind + 1)
        pre = ""
        if tail:
            g.emit(ind + 1, f"if tid + {g.NT} * u < {self.total}:")
            pre = "    "
        g.emit(ind + 1, f"{pre}sm[uint64({addr})] = xl[{xo} + u]")


def _fwd2(g, lse_out):
    """The forward of VEC 2 configurations: each thread holds MI contiguous rows x NJ
    contiguous columns of a score tile and MI rows x OC output columns (W-wide groups
    tx W + e + W TX k), and each k-step of both products reads them as float4 / float2 loads
    (Q^T, K^T and P^T stored [k][row], V row-major), conflict-free and broadcast within a warp:
    (MI + NJ) / 4 shared loads for MI NJ FMAs where VEC 0 needs MI + NJ. The softmax works in
    base 2 (log2 e folded into the scale: one FFMA and one ex2 a score); masks are one compare
    per score; K / V tiles are prefetched into registers (PF) while the current one is used."""
    D, BR, BC, MI, NJ, OC, TX, ct = g.D, g.BR, g.BC, g.MI, g.NJ, g.OC, g.TX, g.ct
    W = 4 if OC % 4 == 0 else 2 if OC % 2 == 0 else 1
    QB, KB = 0, D * (BR + 4)
    VB = KB + D * (BC + 4)
    PB = VB + BC * (D + 4)
    g.header(["q", "k", "v"], ", La, lo" if lse_out else "", "O")
    for name, shape in (("s", (MI, NJ)), ("m", (MI,)), ("l", (MI,)), ("o", (MI, OC))):
        g.local(name, *shape)
    _query_rows(g)
    tq, tk, tv = _Tile(g, "q", BR, True), _Tile(g, "k", BC, True), _Tile(g, "v", BC, False)
    for t in (tq, tk, tv):
        t.prologue(1)
    g.emit(1, f"c2 = {ct}(scale_ * {1 / math.log(2)!r})",
           "qb_ = qo + b * qs0 + n * qs2", "kb_ = ko + b * ks0 + kh * ks2",
           "vb_ = vo + b * vs0 + kh * vs2")
    tq.fetch(1, "row0", "T", "q", "n", "H", QB, 0)
    tq.put(1, f"{QB} + d * {BR + 4} + r", 0)
    g.emit(1, f"for i in range({MI}):", "    m[i] = NEG", f"    l[i] = {ct}(0)")
    _zero(g, 1, "o", MI, OC)
    XV = tk.U

    def fetch(ind, r0):
        tk.fetch(ind, r0, "S", "k", "kh", "H", KB, 0)
        tv.fetch(ind, r0, "S", "v", "kh", "HV", VB, XV)
    if g.PF:
        g.emit(1, "if 0 < lim:")
        fetch(2, "0")
    g.emit(1, f"for c0 in range(0, lim, {BC}):")
    if not g.PF:
        fetch(2, "c0")
    tk.put(2, f"{KB} + d * {BC + 4} + r", 0)
    tv.put(2, f"{VB} + r * {D + 4} + d", XV)
    g.emit(2, "cuda.syncthreads()")
    if g.PF:
        g.emit(2, f"if c0 + {BC} < lim:")
        fetch(3, f"(c0 + {BC})")
    # S = Q K^T: MI rows x NJ columns a thread, both read as vectors at every k
    _zero(g, 2, "s", MI, NJ)
    g.emit(2, f"pa = uint64({QB} + ty * {MI})", f"pb = uint64({KB} + tx * {NJ})")
    g.kloop(2, "kk", D, g.vloads("av", MI, "pa") + g.vloads("bv", NJ, "pb") + [
        f"for i in range({MI}):", f"    for j in range({NJ}):",
        "        s[i, j] += av[i] * bv[j]", f"pa += uint64({BR + 4})", f"pb += uint64({BC + 4})"])
    # online softmax in base 2; masked scores -inf
    g.emit(2, f"for i in range({MI}):", f"    row = row0 + ty * {MI} + i",
           "    cl = min(S, row + 1) if causal else S", "    mx = NEG",
           f"    for j in range({NJ}):", "        x = s[i, j] * c2",
           f"        if c0 + tx * {NJ} + j >= cl:", "            x = NEG", "        s[i, j] = x",
           "        mx = max(mx, x)")
    g.group(3, "mx", "max")
    g.emit(3, "mn = max(m[i], mx)", f"mu = mn if mn > NEG else {ct}(0)",
           "al = math.exp2(m[i] - mu)", "m[i] = mn", f"ls = {ct}(0)",
           f"for j in range({NJ}):", "    x = math.exp2(s[i, j] - mu)", "    s[i, j] = x",
           "    ls += x", "l[i] = l[i] * al + ls", f"for k in range({OC}):", "    o[i, k] *= al")
    # P^T: column j of this thread's rows, MI contiguous words
    pw = 4 if MI % 4 == 0 else 2 if MI % 2 == 0 else 1
    g.emit(2, f"for j in range({NJ}):",
           f"    pp = uint64({PB} + (tx * {NJ} + j) * {BR + 4} + ty * {MI})")
    if g.sim or pw == 1:
        g.emit(3, f"for i in range({MI}):", "    sm[pp + uint64(i)] = s[i, j]")
    else:
        for i0 in range(0, MI, pw):
            vals = ", ".join(f"s[{i0 + i}, j]" for i in range(pw))
            g.emit(3, f"st{pw}(sm, pp{f' + uint64({i0})' if i0 else ''}, {vals})")
    g.emit(2, "cuda.syncthreads()")
    # O += P V: MI rows of P^T and OC columns of V (W-wide groups) a key
    g.emit(2, f"pa = uint64({PB} + ty * {MI})", f"pb = uint64({VB} + tx * {W})")
    body = g.vloads("av", MI, "pa")
    for k0 in range(0, OC, W):
        off = (k0 // W) * W * TX
        ptr = f"pb + uint64({off})" if off else "pb"
        body += [x.replace("wv[", f"wv[{k0} + ") for x in g.vloads("wv", W, ptr)]
    g.kloop(2, "c", BC, body + [f"for i in range({MI}):", f"    for k in range({OC}):",
                                "        o[i, k] += av[i] * wv[k]", f"pa += uint64({BR + 4})",
                                f"pb += uint64({D + 4})"])
    g.emit(2, "cuda.syncthreads()")
    g.emit(1, f"for i in range({MI}):", "    li = l[i]")
    g.group(2, "li", "sum")
    g.emit(2, f"t = row0 + ty * {MI} + i")
    if lse_out:
        g.emit(2, "if t < T and tx == 0:",
               f"    La[uint64(lo + (b * N + n) * T + t)] = {g.out}(m[i] * {ct}"
               f"({math.log(2)!r}) + math.log(li)) if li > 0 else {g.out}(NEG)")
    g.emit(2, f"inv = {ct}(1) / li if li > 0 else {ct}(0)", "if t < T:",
           "    ob = outo + ((b * T + t) * N + n) * HV", f"    for k in range({OC}):",
           f"        e = (k // {W}) * {W * TX} + tx * {W} + k % {W}", "        if e < HV:",
           f"            O[uint64(ob + e)] = {g.out}(o[i, k] * inv)")


def _delta2(g):
    """delta's VEC 2 form, no shared memory: the TX lanes of a row read its o and do values
    straight from global memory (dims tx + TX k; a warp's rows consecutive: rows ty + TY i),
    every load of a thread issued before the first product; the row sums as _fwd_like's
    (each lane's dims in order, then the lanes' shuffle tree)."""
    TY, TX, MI, NT, ct = g.TY, g.TX, g.MI, g.NT, g.ct
    OC = -(-g.D // TX)
    g.emit(0, "", "@cuda.jit(OPTS)",
           f"def kernel({_operand('o')}, {_operand('g')}, La, lo, ST, outo, T, S, N, G, H, HV, "
           "causal, scale_):")
    if g.sim:
        g.emit(1, f"red = cuda.shared.array({NT}, {ct})")
    g.emit(1, "tid = cuda.threadIdx.x", f"ty = tid // {TX}", f"tx = tid - ty * {TX}",
           f"xs = cuda.local.array(({MI}, {OC}), {ct})", f"ys = cuda.local.array(({MI}, {OC}), {ct})",
           f"ls = cuda.local.array({MI}, {ct})",
           "bn = cuda.blockIdx.x", "b = bn // N", "n = bn - b * N",
           f"row0 = cuda.blockIdx.y * {g.BR}", "ob_ = oo + b * os0 + n * os2",
           "gb_ = go + b * gs0 + n * gs2", "lb_ = lo + (b * N + n) * T",
           f"for i in range({MI}):", f"    t = row0 + ty + {TY} * i", f"    ls[i] = {ct}(0)",
           "    if t < T:", f"        ls[i] = {ct}(La[uint64(lb_ + t)])",
           f"    for k in range({OC}):", f"        d = tx + {TX} * k", f"        x = {ct}(0)",
           f"        y = {ct}(0)", "        if t < T and d < HV:",
           f"            x = {ct}(Oa[uint64(ob_ + t * os1 + d * os3)])",
           f"            y = {ct}(Ga[uint64(gb_ + t * gs1 + d * gs3)])",
           "        xs[i, k] = x", "        ys[i, k] = y",
           f"for i in range({MI}):", f"    x = {ct}(0)", f"    for k in range({OC}):",
           "        x += xs[i, k] * ys[i, k]")
    g.group(2, "x", "sum")
    g.emit(2, f"t = row0 + ty + {TY} * i", "if t < T and tx == 0:",
           "    sti = outo + ((b * N + n) * T + t) * 2", f"    ST[sti] = {g.st_out}(ls[i])",
           f"    ST[sti + 1] = {g.st_out}(x)")


def _dq(g):
    D, BR, BC, MI, NJ, OC, TX, ct = (g.D, g.BR, g.BC, g.MI, g.NJ, g.OC, g.TX, g.ct)
    P = g.P
    QB, GB = 0, D * (BR + P)
    KB = 2 * D * (BR + P)
    VB = KB + D * (BC + P)
    g.header(["q", "k", "v", "g"], ", ST, sto", "DQ")
    for name, shape in (("s", (MI, NJ)), ("p", (MI, NJ)), ("o", (MI, OC)), ("lse", (MI,)),
                        ("dl", (MI,))):
        g.local(name, *shape)
    _query_rows(g)
    g.load_tile(1, "row0", "T", BR, [("q", "n", "H", QB), ("g", "n", "HV", GB)])
    # this thread's rows' logsumexp / delta (-inf lse -> +inf: its probabilities come out 0)
    g.emit(1, f"for i in range({MI}):", f"    t = row0 + {g.row('i')}",
           "    lse[i] = POS", f"    dl[i] = {ct}(0)", "    if t < T:",
           "        sti = sto + ((b * N + n) * T + t) * 2",
           f"        x = {ct}(ST[sti])", "        lse[i] = POS if x == NEG else x",
           f"        dl[i] = {ct}(ST[sti + 1])")
    _zero(g, 1, "o", MI, OC)
    kv = [("k", "kh", "H", KB), ("v", "kh", "HV", VB)]
    g.stream(1, "0", "lim", "S", kv)
    g.emit(2, "cuda.syncthreads()")
    g.prefetch(2, "lim", "S", kv)
    g.mm_rows_cols(2, "s", QB, BR, KB, BC, "H")
    g.mm_rows_cols(2, "p", GB, BR, VB, BC, "HV")
    g.emit(2, "cuda.syncthreads()")
    # dS = P * (dP - delta), P = exp(s q.k - lse) (masked: 0), stored transposed over V
    g.emit(2, f"for i in range({MI}):", f"    row = row0 + {g.row('i')}",
           f"    for j in range({NJ}):", f"        col = c0 + {g.col('j')}",
           "        x = math.exp(s[i, j] * sc - lse[i])",
           "        if col >= S or (causal and col > row):", f"            x = {ct}(0)",
           f"        sm[uint64({VB} + ({g.col('j')}) * {BR + P} + {g.row('i')})] = "
           "x * (p[i, j] - dl[i])")
    g.emit(2, "cuda.syncthreads()")
    g.mm_scores_out(2, [("o", VB, KB, BC)], f"min({BC}, lim - c0)")
    g.emit(2, "cuda.syncthreads()")
    g.emit(1, f"for i in range({MI}):", f"    t = row0 + {g.row('i')}", "    if t < T:",
           "        ob = outo + ((b * T + t) * N + n) * H", f"        for k in range({OC}):",
           f"            d = tx + k * {TX}", "            if d < H:",
           f"                DQ[uint64(ob + d)] = {g.out}(o[i, k] * sc)")


def _dkv(g, merged=False):
    """dK and dV of a key tile (queries streamed). merged (attention_bwd): also this tile's
    dQ partial dS K per query tile into DQP, laid out [tile][B, rows, N, H] with rows T - rs,
    rs the first streamed query row (dqsum adds the tiles up). dK / dV of key row s, head kh
    go to DKV[outo / ovo + (b S + s) ors + kh ohs + d] (runtime strides: attention_dkv's
    [B, S, K, H + Hv] or the packed [B, T, N + 2K, H] rows)."""
    D, BR, BC, MI, NJ, OC, TX, ct = (g.D, g.BR, g.BC, g.MI, g.NJ, g.OC, g.TX, g.ct)
    P = g.P
    tiles = None
    if merged:   # (BR == BC: the dQ product shares the dK / dV products' device function)
        g.fn = True
        g.cb = bool(g.vec) and BR % 4 == 0
        g.device_fns()
        if g.cb and g.PF and BC <= g.NT:   # the forward's Gray-order fetch, one device function
            tiles = _Tile(g, "q", BC, True), _Tile(g, "q", BC, True)
            if tiles[0].split:
                tiles[0].fetch_fn()
                tiles[1].fn = True
    # cb: V^T rows unpadded (V is only read along rows: no conflicts), the query statistics in
    # the padding of P^T's rows (words BR, BR + 1): 5 blocks an SM fit at W2's (32, 32), D 64
    pack = g.cb and g.vec == 2
    VR = BR if pack else BR + P
    KB, VB = 0, D * (BR + P)
    QB = VB + D * VR
    GB = QB + D * (BC + P)
    PB = GB + D * (BC + P)
    DB = PB + BC * (BR + P)
    LB = DB + BC * (BR + P)
    lse_at, dl_at = ((lambda j: f"{PB} + ({j}) * {BR + P} + {BR}"),
                     (lambda j: f"{PB} + ({j}) * {BR + P} + {BR + 1}")) if pack else \
        ((lambda j: f"{LB} + {j}"), (lambda j: f"{LB + BC} + {j}"))
    g.header(["q", "k", "v", "g"], ", ST, sto" + (", DQP, dqpo" if merged else ""), "DKV",
             ", ovo, ors, ohs")
    MQ = BC // g.TY   # merged: dQ rows (queries) per thread (= MI)
    regs = [("s", (MI, NJ)), ("p", (MI, NJ)), ("dk", (MI, OC)), ("dv", (MI, OC))]
    for name, shape in regs + ([("dq", (MQ, OC))] if merged else []):
        g.local(name, *shape)
    g.emit(1, "KH = N // G", "bk = cuda.blockIdx.x", "b = bk // KH", "kh = bk - b * KH",
           f"row0 = cuda.blockIdx.y * {BR}", f"start = (row0 // {BC}) * {BC} if causal else 0")
    if merged:   # the partial rows of the key tiles before this one, and of this one
        g.emit(1, "pr = 0", "for j_ in range(cuda.blockIdx.y):",
               f"    pr += max(0, T - ((j_ * {BR}) // {BC}) * {BC}) if causal else T",
               "nq = max(0, T - start)", "dqb = dqpo + (cuda.gridDim.x // KH) * pr * N * H")
    g.load_tile(1, "row0", "S", BR, [("k", "kh", "H", KB), ("v", "kh", "HV", VB, VR)])
    _zero(g, 1, "dk", MI, OC)
    _zero(g, 1, "dv", MI, OC)
    g.emit(1, "for gi in range(G):", "    n = kh * G + gi")
    qg = [("q", "n", "H", QB), ("g", "n", "HV", GB)]
    st = ["t = c0 + j", "lse_ = POS", f"dl_ = {ct}(0)", f"if j < {BC} and t < T:",
          "    sti = sto + ((b * N + n) * T + t) * 2", f"    x = {ct}(ST[sti])",
          "    lse_ = POS if x == NEG else x", f"    dl_ = {ct}(ST[sti + 1])"]
    if tiles:   # Q and dO (same map: one r_q, d_q)
        tiles[0].prologue(2)
        g.emit(2, "qb_ = qo + b * qs0 + n * qs2", "gb_ = go + b * gs0 + n * gs2")

        def fetch(ind, r0):
            tiles[0].fetch(ind, r0, "T", "q", "n", "H", QB, 0)
            tiles[1].fetch(ind, r0, "T", "g", "n", "HV", GB, tiles[0].U)
        g.emit(2, "if start < T:")
        fetch(3, "start")
    if BC <= g.NT:   # the query rows' statistics loaded beside the tile (one latency, not two)
        pre = ["    j = tid"] + ["    " + x for x in st]
        if tiles:
            g.emit(2, f"for c0 in range(start, T, {BC}):", *pre)
            tiles[0].put(3, f"{QB} + d * {BC + P} + r", 0)
            tiles[1].put(3, f"{GB} + d * {BC + P} + r", tiles[0].U)
        else:
            g.stream(2, "start", "T", "T", qg, pre)
        g.emit(3, f"if tid < {BC}:", f"    sm[{lse_at('tid')}] = lse_",
               f"    sm[{dl_at('tid')}] = dl_")
    else:
        g.stream(2, "start", "T", "T", qg)
        g.emit(3, f"for j in range(tid, {BC}, {g.NT}):", *("    " + x for x in st),
               f"    sm[{lse_at('j')}] = lse_", f"    sm[{dl_at('j')}] = dl_")
    g.emit(3, "cuda.syncthreads()")
    if tiles:
        g.emit(3, f"if c0 + {BC} < T:")
        fetch(4, f"(c0 + {BC})")
    else:
        g.prefetch(3, "T", "T", qg)
    g.mm_rows_cols(3, "s", KB, BR, QB, BC, "H")
    g.mm_rows_cols(3, "p", VB, VR - P, GB, BC, "HV")
    # P^T and dS^T tiles ([query][key]); masked (query before key) entries 0
    g.emit(3, f"for j in range({NJ}):", f"    cj = {g.col('j')}", f"    lse_ = sm[{lse_at('cj')}]",
           f"    dl_ = sm[{dl_at('cj')}]", "    col = c0 + cj",
           f"    for i in range({MI}):", f"        r = {g.row('i')}",
           "        x = math.exp(s[i, j] * sc - lse_)",
           "        if causal and col < row0 + r:", f"            x = {ct}(0)")
    if g.vec and not g.sim and MI % 4 == 0:   # this thread's MI contiguous rows: float4 stores
        g.emit(5, "s[i, j] = x", "p[i, j] = x * (p[i, j] - dl_)")
        for i0 in range(0, MI, 4):
            at = f"cj * {BR + P} + ty * {MI} + {i0}"
            for base, arr in ((PB, "s"), (DB, "p")):
                vals = ", ".join(f"{arr}[{i0 + i}, j]" for i in range(4))
                g.emit(4, f"st4(sm, uint64({base} + {at}), {vals})")
    else:
        g.emit(5, f"sm[uint64({PB} + cj * {BR + P} + r)] = x",
               f"sm[uint64({DB} + cj * {BR + P} + r)] = x * (p[i, j] - dl_)")
    g.emit(3, "cuda.syncthreads()")
    g.mm_scores_out(3, [("dv", PB, GB, BC), ("dk", DB, QB, BC)], f"min({BC}, T - c0)")
    if merged:
        _dq_partial(g, 3, MQ, KB, DB)
    g.emit(3, "cuda.syncthreads()")
    g.emit(1, f"for i in range({MI}):", f"    s_ = row0 + {g.row('i')}", "    if s_ < S:",
           "        ob = (b * S + s_) * ors + kh * ohs",
           f"        for k in range({OC}):", f"            d = tx + k * {TX}",
           "            if d < H:",
           f"                DKV[uint64(outo + ob + d)] = {g.out}(dk[i, k] * sc)",
           "            if d < HV:",
           f"                DKV[uint64(ovo + ob + d)] = {g.out}(dv[i, k])")


def _dq_partial(g, ind, MQ, KB, DB):
    """dq[i, k] = sum_r dS[q(i), r] K[r, tx + TX k] over this tile's keys (dS^T read across
    its rows), written unscaled to the tile's partial rows c0 + q(i) - start."""
    BR, TX, OC, P = g.BR, g.TX, g.OC, g.P
    qrow = (lambda i: f"ty * {MQ} + {i}") if g.vec else (lambda i: f"ty + {i} * {g.TY}")
    ri = BR + P if g.vec else g.TY * (BR + P)
    _zero(g, ind, "dq", MQ, OC)
    g.so_call(ind, "dq", f"{DB} + ({qrow(0)}) * {BR + P}", ri, 1, KB, BR, f"min({BR}, S - row0)")
    g.emit(ind,
           f"for i in range({MQ}):", f"    t = c0 + {qrow('i')}", "    if t < T:",
           "        ob = dqb + ((b * nq + t - start) * N + n) * H",
           f"        for k in range({OC}):", f"            d = tx + k * {TX}",
           "            if d < H:", "                DQP[uint64(ob + d)] = dq[i, k]")


def dqsum_shape(nh, sim):
    """(threads, elements per thread E) of the dQ-partials sum over rows of nh values."""
    nt = 8 if sim else 128
    return nt, max(1, min(4, -(-nh // nt)))


def _dqsum(g, NT, E, U=8):
    """dq[b, t] = scale * (the partials of key tiles 0, 1, ... that reach row t, in order):
    one block of NT threads per (b, t) row, a thread's E values NT apart. The loads of U tiles
    x E values are issued before their adds (a load-add chain keeps one load in flight per
    thread: 1.2 TB/s on an H200). Row (b, t) goes to DQ[outo + (b T + t) ors ...] (ors: N H,
    or (N + 2K) H in the packed layout)."""
    BR, BC, ct = g.BR, g.BC, g.ct
    g.emit(0, "", "@cuda.jit(OPTS)",
           "def kernel(DQP, dqpo, DQ, outo, ors, T, N, H, J, causal, scale_):")
    g.emit(1, f"xs = cuda.local.array(({U}, {E}), {ct})", f"acc = cuda.local.array({E}, {ct})",
           "bt = cuda.blockIdx.x", "b = bt // T", "t = bt - b * T", "B_ = cuda.gridDim.x // T",
           "NH = N * H", f"sc = {ct}(scale_)",
           # key tiles whose first streamed query row ((j * BR) // BC) * BC is <= t
           f"jn = min(J, -(-((t // {BC} + 1) * {BC}) // {BR})) if causal else J",
           f"for i0 in range(cuda.threadIdx.x, NH, {NT * E}):",
           f"    for e in range({E}):", f"        acc[e] = {ct}(0)",
           "    pr = 0", f"    for j0 in range(0, jn, {U}):", f"        for u in range({U}):",
           "            if j0 + u < jn:",
           f"                rs = (((j0 + u) * {BR}) // {BC}) * {BC} if causal else 0",
           "                at = dqpo + (B_ * pr + b * (T - rs) + t - rs) * NH + i0",
           f"                for e in range({E}):", f"                    xs[u, e] = {ct}(0)",
           f"                    if i0 + e * {NT} < NH:",
           f"                        xs[u, e] = DQP[uint64(at + e * {NT})]",
           "                pr += T - rs", f"        for u in range({U}):",
           "            if j0 + u < jn:", f"                for e in range({E}):",
           "                    acc[e] += xs[u, e]",
           f"    for e in range({E}):", f"        if i0 + e * {NT} < NH:",
           f"            DQ[uint64(outo + bt * ors + i0 + e * {NT})] = {g.out}(acc[e] * sc)")


def source(mode, dtype, st_dtype, D, cfg, sim, opts, nh=0):
    """Kernel source for `mode` ('fwd', 'fwdl', 'stats', 'delta', 'dq', 'dkv', 'bwd',
    'dqsum': the merged backward and its dQ partials' sum, both of a 'bwd' configuration; nh:
    the sum's row length N * H)."""
    g = _Gen(mode, dtype, st_dtype, D, cfg, sim)
    fwd2 = g.vec == 2
    {"fwd": lambda: _fwd2(g, False) if fwd2 else _fwd_like(g, False),
     "stats": lambda: _fwd_like(g, True),
     "fwdl": lambda: _fwd2(g, True) if fwd2 else _fwd_like(g, False, lse_out=True),
     "delta": lambda: _delta2(g) if fwd2 else _fwd_like(g, True, lse_in=True),
     "dq": lambda: _dq(g), "dkv": lambda: _dkv(g), "bwd": lambda: _dkv(g, merged=True),
     "dqsum": lambda: _dqsum(g, *dqsum_shape(nh, sim))}[mode]()
    return "\n".join(g.L).replace("OPTS", opts) + "\n"
