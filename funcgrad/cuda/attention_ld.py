"""Vector shared-memory loads and stores for the SIMT attention kernels: numba intrinsics (one 8- or
16-byte access of 2 or 4 consecutive elements at a 16-byte-aligned word index: ld.shared.v2 / v4,
st.shared.v2 / v4).

NVVM merges consecutive scalar loads only where it can prove their alignment, which it does not
inside the product loops (pointer recurrences); these make the VEC tile layout's float4 reads
explicit. The simulator cannot run them: its kernels keep scalar loads (attention_src.py).
"""
from __future__ import annotations

from numba.cuda.extending import intrinsic

from funcgrad.cuda.vecmem import vector_load, vector_store

# (x[i], x[i + 1]) and (x[i], ..., x[i + 3]): i a multiple of 2 (4), x's data 16-byte aligned.
# Declared 8 / 16 bytes aligned whatever the dtype: a float64 tile's 4-word index is only known
# to be 16-byte aligned (vecmem's default would declare 32)
ld2 = intrinsic(vector_load(2, align=8))
ld4 = intrinsic(vector_load(4, align=16))


# x[i:i + 2] = a, b and x[i:i + 4] = a, b, c, d (the same alignment as ld2 / ld4)
st2 = intrinsic(vector_store(2, align=8))
st4 = intrinsic(vector_store(4, align=16))
