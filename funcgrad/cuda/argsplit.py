"""argmax / argmin of few long rows in two passes: chunks of a row across blocks, then a merge.

The one-block-per-row kernel of reduce.py leaves all but one SM idle when there are few rows:
a decode step's argmax over GPT-2's 50,304 logits took 76 us on an H200 (one block of 256
threads, about 200 dependent loads per thread). Here the first pass runs reduce.py's row kernel
over G chunks of CHUNK values per row (G blocks per row), each writing the index of its best
value; the second, one block per row, reads the G candidates' values back and keeps the best
by the same order (the larger value, NaN first, the lower index on ties), so the result is
the same first occurrence as the one-pass kernel's, bit for bit.
"""
from __future__ import annotations

import numpy as np

from funcgrad.compile import switches
from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, pool
from funcgrad.cuda.elementwise import load as load_src
from funcgrad.cuda.elementwise import nbt

CHUNK = 2048       # values per first-pass block
MAX_ROWS = 64      # rows beyond which one block per row fills the GPU anyway
switches.register(__name__, "CHUNK", "MAX_ROWS")   # a change keys jit's shared cache apart


def wanted(K: int, R: int, col: bool) -> bool:
    """Whether K rows of R values (not the column kernel's case) take the two passes."""
    return not col and K <= MAX_ROWS and R >= 2 * CHUNK


def _merge_source(in_dtype, acc, out_dtype, threads, better, ident, big):
    ct, out = nbt(acc), nbt(out_dtype)
    load = f"{ct}({load_src(in_dtype, 'x[base + r * sr]')})"   # (bfloat16: its bits widened)
    L = [better, f"\n@cuda.jit({runtime.jit_opts()})",
         "def kernel(K, G, x, xo, sk, sr, mid, mo, o, oo):",
         f"    sv = cuda.shared.array({threads}, {ct})",
         f"    si = cuda.shared.array({threads}, int64)",
         "    t = cuda.threadIdx.x", "    k = cuda.blockIdx.x", "    while k < K:",
         "        base = xo + k * sk", f"        acc = {ident}",
         f"        ai = {big}", "        g = t", "        while g < G:",
         "            r = mid[mo + k * G + g]", f"            if r < {big}:",
         f"                v = {load}", "                if better(v, r, acc, ai):",
         "                    acc = v", "                    ai = r",
         f"            g += {threads}", "        sv[t] = acc", "        si[t] = ai",
         "        cuda.syncthreads()", f"        s = {threads // 2}", "        while s > 0:",
         "            if t < s:", "                if better(sv[t + s], si[t + s], sv[t], si[t]):",
         "                    sv[t] = sv[t + s]", "                    si[t] = si[t + s]",
         "            cuda.syncthreads()", "            s //= 2", "        if t == 0:",
         f"            o[oo + k] = {out}(si[0])", "        cuda.syncthreads()",
         "        k += cuda.gridDim.x"]
    return "\n".join(L) + "\n"


def arg_reduce(kind: str, x: DeviceBuffer, K: int, R: int, sk: int, sr: int,
               out: DeviceBuffer, first_pass, acc, better: str, ident: str,
               big: int) -> DeviceBuffer:
    """argmax / argmin of x seen as K rows of R (strides sk, sr) into `out` (K, contiguous).

    reduce.py passes its pieces: first_pass(mid, G) runs its row kernel over G chunks a row
    into the int64 indices `mid`; `better` is the source of its device function
    better(va, ia, vb, ib), `ident` the accumulator's start (acc its dtype), `big` the index
    of an empty chunk."""
    G = -(-R // CHUNK)
    mid = pool().empty((K * G,), np.int64)
    first_pass(mid, G)
    threads = runtime.reduce_threads()
    key = ("argsplit_merge", kind, x.dtype.name, acc.name, out.dtype.name, threads)
    k = runtime.kernel(key, lambda: _merge_source(x.dtype, acc, out.dtype, threads, better,
                                                  ident, big))
    blocks = max(1, min(K, 2 if runtime.SIM else 65535))
    k[blocks, threads, runtime.stream()](K, G, x.arr(), x.offset, sk, sr, mid.arr(), mid.offset,
                                         out.arr(), out.offset)
    return out
