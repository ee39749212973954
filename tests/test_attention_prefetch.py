"""The attention kernels' streamed-tile prefetch (attention_tc.PREFETCH, attention_bf.PREFETCH):
the same bits as loading each tile in place, for the TF32 and bf16 forward, dq and dkv (GQA,
causal, a partial last tile, dkv's head split), and the register gate's choices at S1 / S2."""
from __future__ import annotations

import numpy as np
import pytest
from attention_cases import dev as _dev
from attention_cases import operands
from attention_cases import usable as _usable

from funcgrad.core import bind
from funcgrad.core.dtypes import bfloat16
from funcgrad.cuda import attention_bf as AB
from funcgrad.cuda import attention_tc as ATC
from funcgrad.prims import attention as A
from funcgrad.prims import attention_lse as AL


@pytest.mark.cuda
@pytest.mark.skipif(not _usable(), reason="no GPU and no CUDA simulator")
@pytest.mark.parametrize("kind", ["tf32", "bf16"])
def test_prefetch_gives_the_bits_of_loading_in_place(kind, monkeypatch):
    from funcgrad.cuda import attention as CA
    monkeypatch.setattr(CA, "DKV_SPLIT", 2)
    _, q, k, v, do = operands(1, 37, 35, 1, 4, 16, 16)
    if kind == "bf16":
        q, k, v, do = (x.astype(bfloat16) for x in (q, k, v, do))
    prm = {"scale": 0.3, "causal": True}
    if kind == "tf32":
        prm["precision"] = "tensorfloat32"
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))
    st = A._stats_impl(q64, k64, A._attn_impl(q64, k64, v64, **prm), do64, **prm)
    qd, kd, vd, dod = _dev(q, k, v, do)
    std = _dev(st.astype(np.float32))[0]
    fwd = AL.attention_fwdl_p if kind == "tf32" else A.attention_p
    runs = []
    for on in (True, False):
        monkeypatch.setattr(ATC if kind == "tf32" else AB, "PREFETCH", on)
        runs.append([np.asarray(bind(p, *a, **prm)) for p, a in [
            (fwd, (qd, kd, vd)), (A.attention_dq_p, (qd, kd, vd, dod, std)),
            (A.attention_dkv_p, (qd, kd, vd, dod, std))]])
    for name, a, b in zip(("fwd", "dq", "dkv"), *runs, strict=True):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (kind, name)


def test_prefetch_register_gate():
    """Prefetched where the registers allow: at head dim 128 the TF32 forward and dq (S2's
    configurations) and every bf16 kernel, not S2's TF32 dkv (4 warps x 32 rows: 64 prefetched
    floats beside 160 of accumulators); at 64 (S1) all of them."""
    on = {(m, d, c) for m, d, c in [("fwdl", 128, (8, 32)), ("dq", 128, (4, 32)),
                                    ("dkv", 128, (4, 16)), ("fwdl", 64, (4, 32)),
                                    ("dq", 64, (4, 16)), ("dkv", 64, (4, 16))]}
    for m, d, c in on | {("dkv", 128, (4, 32))}:
        assert ATC._Gen(m, d, c, False, True).prefetches() == ((m, d, c) in on), (m, d, c)
    for m, c in [("fwd", (4, 64)), ("stats", (4, 64)), ("dq", (4, 64)), ("dkv", (4, 32))]:
        for d in (64, 128):
            assert AB._Gen(m, d, c, False, True).prefetches(), (m, d, c)
