"""Source generator of the flash-attention kernels (forward, stats, dq, dkv): register tiles.

This module holds the configurations and the generator (_Gen); the kernel bodies are in
attention_src_fwd.py (forward side, delta) and attention_src_bwd.py (dq, dkv, merged backward,
dQ sum).

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
against 72.0 us for VEC 0's (64, 32, 32, 8, 0, 8, 1) in the same process. Causal rows are
balanced across blocks (zigzag: a block holds half tiles y and 2 ny - 1 - y; _fwd2's
docstring): 50.2 -> 46.4 us in one process (155 registers).

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

from funcgrad.compile import switches
from funcgrad.cuda.attention_src_bwd import _dkv, _dq, _dqsum, dqsum_shape
from funcgrad.cuda.attention_src_fwd import _delta2, _fwd2, _fwd_like, _operand
from funcgrad.cuda.elementwise import compute_t, nbt

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
switches.register(__name__, "SIM_CONFIG")   # a change keys jit's shared cache apart


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
                   f"for i in range({MI}):", "    for c in range(4):",
                   f"        a4[i, c] = sm[{a}]"]
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
                      f"        for k in range({OC}):",
                      "            acc[i, k] += a4[i, c] * b4[k, c]",
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
