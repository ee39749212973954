"""Issue 12's lax/nn compositions on the CUDA backend (== CPU), under the simulator or a GPU."""
import numpy as np
import pytest

import funcgrad
import funcgrad.cuda as fcuda
from funcgrad import lax, nn

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not fcuda.usable(),
                       reason="no GPU; run with NUMBA_ENABLE_CUDASIM=1 to use the simulator"),
]

RNG = np.random.default_rng(3)
X = RNG.standard_normal(6).astype(np.float32)
GDN = lax.GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(1,),
                                 start_index_map=(1,), operand_batching_dims=(0,),
                                 start_indices_batching_dims=(0,))
CFG = [nn.get_scaled_dot_general_config("mxfp8")] * 3

CASES = {
    "bitcast_f32_i32": (lambda x: lax.bitcast_convert_type(x, np.int32), (X,)),
    "bitcast_f32_u8": (lambda x: lax.bitcast_convert_type(x, np.uint8), (X,)),
    "bitcast_i32_f32": (lambda i: lax.bitcast_convert_type(i, np.float32), (X.view(np.int32),)),
    "clz": (lax.clz, (X.view(np.int32),)),
    "reduce_precision": (lambda x: lax.reduce_precision(x, 5, 2), (X,)),
    "reduce_xor": (lambda i: lax.reduce_xor(i, (0,)), (X.view(np.int32),)),
    "bessel_i1e": (lax.bessel_i1e, (10 * X,)),
    "gather_batching_dims": (lambda x, i: lax.gather(x, i, GDN, (1, 1, 2)),
                             (RNG.standard_normal((2, 3, 2)).astype(np.float32),
                              np.array([[[1], [2]], [[0], [0]]], np.int32))),
    "ragged_dot": (lambda a, b: lax.ragged_dot(a, b, np.array([1, 2], np.int32)),
                   (RNG.standard_normal((3, 2)).astype(np.float32),
                    RNG.standard_normal((2, 2, 2)).astype(np.float32))),
    "scaled_dot_general": (lambda a, b: nn.scaled_dot_general(
        a, b, (((1,), (1,)), ((), ())), configs=CFG),
        (RNG.standard_normal((2, 32)).astype(np.float32),
         RNG.standard_normal((2, 32)).astype(np.float32))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_matches_cpu(name):
    f, args = CASES[name]
    with funcgrad.default_device("cpu"):   # not the GPU host's default device, "cuda"
        want = np.asarray(f(*args))
    got = np.asarray(funcgrad.jit(f)(*[funcgrad.device_put(a, "cuda") for a in args]))
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)
