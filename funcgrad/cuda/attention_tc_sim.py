"""The simulator's stand-ins for the TF32 attention kernels' intrinsics (attention_tc.py)."""

# the simulator's stand-ins for mma.py's intrinsics (one warp per block there, so syncthreads
# is the warp's barrier; every lane writes its fragments to a 192-word scratch, then computes)
# and for the vector loads and stores (vecmem.ldv4, attention_ld.st4: four scalar accesses)
SIM_SOURCE = """
import numpy as np


@cuda.jit(device=True)
def mma_tf32(scr, lane, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    g = lane // 4
    t = lane - g * 4
    scr[g * 8 + t] = a0
    scr[(g + 8) * 8 + t] = a1
    scr[g * 8 + t + 4] = a2
    scr[(g + 8) * 8 + t + 4] = a3
    scr[128 + t * 8 + g] = b0
    scr[128 + (t + 4) * 8 + g] = b1
    cuda.syncthreads()
    d0, d1, d2, d3 = c0, c1, c2, c3
    for k in range(8):
        d0 += scr[g * 8 + k] * scr[128 + k * 8 + 2 * t]
        d1 += scr[g * 8 + k] * scr[128 + k * 8 + 2 * t + 1]
        d2 += scr[(g + 8) * 8 + k] * scr[128 + k * 8 + 2 * t]
        d3 += scr[(g + 8) * 8 + k] * scr[128 + k * 8 + 2 * t + 1]
    cuda.syncthreads()
    return float32(d0), float32(d1), float32(d2), float32(d3)



@cuda.jit(device=True)
def tf32(x):
    b = int(np.array(x, np.float32).view(np.uint32))
    if (b & 0x7F800000) != 0x7F800000:
        b = (b + 0x1000) & 0xFFFFE000
    return float32(np.array(b, np.uint32).view(np.float32))
"""

# the vector loads and stores as four scalar accesses (both tensor-core kernel families')
VEC_SIM = '''

@cuda.jit(device=True)
def ldv4(x, i):
    return x[i], x[i + uint64(1)], x[i + uint64(2)], x[i + uint64(3)]


@cuda.jit(device=True)
def st4(x, i, a, b, c, d):
    x[i] = a
    x[i + uint64(1)] = b
    x[i + uint64(2)] = c
    x[i + uint64(3)] = d
'''
SIM_SOURCE += VEC_SIM
