"""The simulator's stand-ins for the bf16 attention kernels' intrinsics (attention_bf.py)."""
from funcgrad.cuda.attention_tc_sim import VEC_SIM

SIM_SOURCE = """
import numpy as np


@cuda.jit(device=True)
def u2f(x):
    return float32(np.array(int(x) & 0xFFFFFFFF, np.uint32).view(np.float32))


@cuda.jit(device=True)
def _bits(x):
    b = int(np.array(x, np.float32).view(np.uint32))
    if (b & 0x7F800000) == 0x7F800000 and (b & 0x7FFFFF):
        return ((b >> 16) | 0x40) & 0xFFFF
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


@cuda.jit(device=True)
def pack_bf16(lo, hi):
    return uint32(_bits(lo) | (_bits(hi) << 16))



@cuda.jit(device=True)
def mma_bf16(scr, lane, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    g = lane // 4
    t = lane - g * 4
    for r, x in ((g * 16 + 2 * t, a0), ((g + 8) * 16 + 2 * t, a1), (g * 16 + 2 * t + 8, a2),
                 ((g + 8) * 16 + 2 * t + 8, a3)):
        scr[r] = u2f(uint32(x) << 16)
        scr[r + 1] = u2f(uint32(x) & 0xFFFF0000)
    for k, x in ((2 * t, b0), (2 * t + 8, b1)):
        scr[256 + k * 8 + g] = u2f(uint32(x) << 16)
        scr[256 + (k + 1) * 8 + g] = u2f(uint32(x) & 0xFFFF0000)
    cuda.syncthreads()
    d0, d1, d2, d3 = c0, c1, c2, c3
    for k in range(16):
        d0 += scr[g * 16 + k] * scr[256 + k * 8 + 2 * t]
        d1 += scr[g * 16 + k] * scr[256 + k * 8 + 2 * t + 1]
        d2 += scr[(g + 8) * 16 + k] * scr[256 + k * 8 + 2 * t]
        d3 += scr[(g + 8) * 16 + k] * scr[256 + k * 8 + 2 * t + 1]
    cuda.syncthreads()
    return float32(d0), float32(d1), float32(d2), float32(d3)
"""
SIM_SOURCE += VEC_SIM
