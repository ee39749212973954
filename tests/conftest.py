"""Shared test set-up: a seeded numpy RNG per test, hypothesis profiles ("ci" when CI=true), and
long GPU tests laid out first across pytest-xdist worksteal workers."""

import itertools
import os

import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=15, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=40, deadline=None)
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "dev")


@pytest.fixture(autouse=True)
def _seed_numpy():
    """Seeds numpy's legacy global RNG so that tests using np.random.* are reproducible."""
    np.random.seed(0)


@pytest.fixture
def rng():
    """A fresh, seeded numpy Generator for the test."""
    return np.random.default_rng(0)


# Seconds the slowest GPU tests took on a cold kernel cache (an H200 host, pytest -n 16 --dist
# worksteal, 2026-11-24, medians of 3 runs): their kernels' compiling (attention kernels take
# 1.5-6 s each; test_memory_flat_over_training_loop runs 1000 eager steps). Prefixes of node
# ids; the longest matching prefix counts, other tests count 1 (a test whose kernels an earlier
# one compiled, e.g. the other shapes of test_kernels_match_numpy, takes about that).
COLD_SECONDS = {
    "tests/test_attention_cuda.py::test_forced_configs_match_numpy[": 30,
    "tests/test_attention_cuda.py::test_kernels_match_numpy[float32-(1, 5, 5, 2, 1, 3, 2, T": 18,
    "tests/test_attention_cuda.py::test_kernels_match_numpy[float64-(1, 5, 5, 2, 1, 3, 2, T": 20,
    "tests/test_attention_cuda.py::test_kernels_match_numpy_drawn_shapes[": 15,
    ("tests/test_attention_cuda.py::test_merged_backward_is_reproducible_and_matches_two_"
     "kernels[False]"): 13,
    "tests/test_attention_cuda.py::test_jitted_grad_with_strided_heads": 4,
    "tests/test_attention_tc.py::test_tc_kernels_match_numpy[": 15,
    "tests/test_fused_bwd.py::test_kernel_matches_numpy[": 10,
    "tests/test_fused_bwd.py::test_kernel_matches_numpy[layer_norm_bwd]": 24,
    "tests/test_fused_bwd.py::test_kernel_matches_numpy[rms_norm_bwd]": 18,
    "tests/test_cuda_backend.py::test_memory_flat_over_training_loop": 18,
    "tests/test_cuda_backend.py::test_small_dtypes[": 12,
    "tests/test_cuda_backend.py::test_small_dtypes[float16]": 6,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[": 2,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[concatenate]": 11,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[dot_general]": 11,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[select_and_scatter_add]": 11,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[conv_general_dilated]": 8,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[arg": 6,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[select": 6,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[reduce_window_": 5,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[reduce_": 3,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[attention_": 4,
    "tests/test_cuda_backend.py::test_matmul_split_k_and_strided_operands[int32]": 4,
    "tests/test_cuda_backend.py::test_broadcasting_ops_hypothesis": 4,
    "tests/test_cuda_random.py::test_same_stream_on_cpu_and_cuda": 16,
    "tests/test_conv_cuda.py::test_cnn_grad_and_jitted_adam_step_equal_cpu[": 11,
    "tests/test_conv_cuda.py::test_conv_dtypes[gemm-int32-int64]": 9,
    "tests/test_conv_cuda.py::test_window_kernels_ties_nan_and_dilations": 4,
    "tests/test_reduce_axes.py::test_reductions_match_numpy": 9,
    "tests/test_linalg_cuda.py::": 3,
    "tests/test_linalg_cuda.py::test_empty_and_one_by_one": 9,
    "tests/test_linalg_cuda.py::test_grad_and_jit_on_cuda_equal_cpu": 9,
    "tests/test_linalg_cuda.py::test_decompositions_match_cpu[": 7,
    "tests/test_cuda_interop.py::test_kernel_sources_are_content_addressed_files": 9,
    "tests/test_cuda_interop.py::test_torch_dlpack_and_cai_zero_copy": 7,
    "tests/test_cuda_interop.py::test_no_gpu_and_no_simulator_is_a_clear_error": 4,
    "tests/test_cuda_fused.py::test_nn_on_cuda_matches_cpu": 7,
    "tests/test_complex_cuda.py::test_elementwise_kernels_match_numpy[": 5,
    "tests/test_lax_breadth_cuda.py::test_cuda_matches_cpu[": 2,
    "tests/test_lax_breadth_cuda.py::test_cuda_matches_cpu[scaled_dot_general]": 6,
    "tests/test_lax_breadth_cuda.py::test_cuda_matches_cpu[bessel": 6,
    "tests/test_lax_breadth_cuda.py::test_cuda_matches_cpu[gather_batching_dims]": 5,
    "tests/test_loops.py::test_cuda_scan_eager_jit_planned_and_grad": 4,
    "tests/test_cuda_jit.py::test_jitted_adam_step_matches_cpu": 4,
}


def _cold_seconds(nodeid: str) -> float:
    best = max((p for p in COLD_SECONDS if nodeid.startswith(p)), key=len, default=None)
    return COLD_SECONDS[best] if best else 1.0


def _worksteal(config) -> bool:
    """True in a pytest-xdist worker of a `--dist worksteal` run (a worker's own option says
    "no"; the controller's command line and PYTEST_ADDOPTS say what was asked)."""
    argv = getattr(config, "workerinput", {}).get("mainargv", [])
    words = " ".join([*argv, os.environ.get("PYTEST_ADDOPTS", "")]).replace("=", " ").split()
    return any(a == "--dist" and b == "worksteal" for a, b in itertools.pairwise(words))


@pytest.hookimpl(trylast=True)   # after `-m` and `-k` have deselected
def pytest_collection_modifyitems(config, items):
    """Under `pytest -n N --dist worksteal`, lay the tests out so that each worker's first chunk
    starts with long tests: worksteal first hands worker i the next len(left) // (N - i)
    tests of the collection in order, and the slow tests (kernels compiled for seconds, most of
    them in test_attention_cuda.py) would otherwise sit together in one or two chunks and end
    the run late. The chunks get the tests longest first (each the chunk with the least
    expected time and room left), and each chunk runs longest first, so that work stolen from
    its tail is short. Every worker collects the same order (the scheduler checks)."""
    n = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if n < 2 or len(items) < 2 * n or not _worksteal(config):
        return
    sizes, left = [], len(items)
    for i in range(n):
        sizes.append(left // (n - i))
        left -= sizes[-1]
    chunks: list[list] = [[] for _ in range(n)]
    load = [0.0] * n
    for item in sorted(items, key=lambda it: -_cold_seconds(it.nodeid)):   # stable: ties stay
        open_ = [i for i in range(n) if len(chunks[i]) < sizes[i]]
        i = min(open_, key=lambda j: (load[j], j))
        chunks[i].append(item)
        load[i] += _cold_seconds(item.nodeid)
    items[:] = [it for chunk in chunks for it in chunk]
