"""Shared test set-up: seeded RNGs, hypothesis profiles, pytest-xdist start-up and layout."""

import itertools
import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

# funcgrad's default is JAX's (64-bit types off); the suite's float64 reference checks need them
# on. Set before funcgrad is imported, so that the subprocesses tests start inherit it too; run
# with JAX_ENABLE_X64=0 to test the default mode (tests of that mode switch it off themselves).
os.environ.setdefault("JAX_ENABLE_X64", "1")

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


@pytest.fixture(scope="module")
def fast_barriers():
    """Short GIL slices for a module's tests under the CUDA simulator, whose block barriers
    (threads of one process) run its barrier-heavy kernels 4-14x faster with them."""
    from funcgrad.cuda import simulator_active
    old = sys.getswitchinterval()
    if simulator_active():
        sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(old)


# Seconds the slowest GPU tests took on a cold kernel cache: `pytest -m cuda -n 16 --dist
# worksteal` on an H200 host, 2026-11-25 (e923893; tests of 3 s and more), their kernels'
# compiling nearly all of it (attention kernels take 1.5-6 s each; each forced attention
# configuration compiles a dozen). Prefixes of node ids; the longest matching prefix counts,
# other tests count 1 (a test whose kernels an earlier one compiled takes about that). Tests
# changed since: test_memory_flat_over_training_loop runs 300 steps (17 s with 1000), and
# test_same_stream_on_cpu_and_cuda's reference runs on the CPU (14 s with it on the GPU), and
# test_forced_configs_match_numpy is one item per (configuration, mode): 18 items, 82 s summed
# cold (H200, 2026-11-25 01:22-01:26; 31-43 s each when every item compiled every mode).
COLD_SECONDS = {
    "tests/test_attention_cuda.py::test_forced_configs_match_numpy[": 5,
    "tests/test_attention_cuda.py::test_kernels_match_numpy[float32-(1, 5, 5, 2, 1, 3, 2, T": 14,
    "tests/test_attention_cuda.py::test_kernels_match_numpy[float64-(1, 5, 5, 2, 1, 3, 2, T": 18,
    "tests/test_attention_cuda.py::test_kernels_match_numpy_drawn_shapes[": 11,
    "tests/test_attention_tc.py::test_tc_kernels_match_numpy[": 11,
    "tests/test_fused_bwd.py::test_kernel_matches_numpy[": 7,
    "tests/test_fused_bwd.py::test_kernel_matches_numpy[layer_norm_bwd]": 15,
    "tests/test_fused_bwd.py::test_kernel_matches_numpy[rms_norm_bwd]": 20,
    "tests/test_linalg_cuda.py::": 3,
    "tests/test_linalg_cuda.py::test_grad_and_jit_on_cuda_equal_cpu": 13,
    "tests/test_linalg_cuda.py::test_decompositions_match_cpu[float32]": 10,
    "tests/test_cuda_backend.py::test_small_dtypes[": 9,
    "tests/test_cuda_backend.py::test_small_dtypes[float16]": 6,
    "tests/test_cuda_backend.py::test_memory_flat_over_training_loop": 6,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[": 2,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[select_and_scatter_add]": 10,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[dot_general]": 8,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[conv_general_dilated]": 7,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[concatenate]": 7,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[attention_": 6,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[reduce_window_": 6,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[reduce_window_sum]": 4,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[arg": 5,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[select_and_gather_add]": 4,
    "tests/test_cuda_backend.py::test_primitive_matches_cpu[reduce_": 3,
    "tests/test_cuda_random.py::test_same_stream_on_cpu_and_cuda": 4,
    "tests/test_conv_cuda.py::test_cnn_grad_and_jitted_adam_step_equal_cpu[gemm]": 8,
    "tests/test_conv_cuda.py::test_cnn_grad_and_jitted_adam_step_equal_cpu[direct]": 6,
    "tests/test_conv_cuda.py::test_conv_dtypes[gemm-int32-int64]": 4,
    "tests/test_cuda_interop.py::test_kernel_sources_are_content_addressed_files": 7,
    "tests/test_cuda_interop.py::test_torch_dlpack_and_cai_zero_copy": 6,
    "tests/test_lax_breadth_cuda.py::test_cuda_matches_cpu[": 2,
    "tests/test_lax_breadth_cuda.py::test_cuda_matches_cpu[scaled_dot_general]": 7,
    "tests/test_lax_breadth_cuda.py::test_cuda_matches_cpu[bessel": 6,
    "tests/test_lax_breadth_cuda.py::test_cuda_matches_cpu[gather_batching_dims]": 6,
    "tests/test_complex_cuda.py::test_elementwise_kernels_match_numpy[": 5,
    "tests/test_reduce_axes.py::test_reductions_match_numpy": 4,
    "tests/test_cuda_fused.py::test_nn_on_cuda_matches_cpu": 4,
    "tests/test_loops.py::test_cuda_scan_eager_jit_planned_and_grad": 4,
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


def pytest_configure(config):
    """In the controller of a `pytest -n N` run, compile the bytecode the workers will load
    before they start (`_warm_bytecode`); and keep the 64-bit switch as JAX_ENABLE_X64 says
    should a plugin have imported funcgrad before this file set it."""
    if "funcgrad.config" in sys.modules:
        from funcgrad.config import check_flag
        from funcgrad.config import config as fg_config
        flag = check_flag(os.environ["JAX_ENABLE_X64"], "JAX_ENABLE_X64")
        fg_config.update("enable_x64", flag)
    if (not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None)
            and getattr(config.option, "dist", "no") != "no"):
        _warm_bytecode(config)


def _warm_bytecode(config) -> None:
    """Write the test modules' assertion-rewritten bytecode and funcgrad's bytecode once, in
    parallel, before the workers start. On a fresh checkout every worker otherwise rewrites and
    compiles the same ~90 test modules and funcgrad's modules at the same moment: collecting
    took a process 4.5 s of CPU cold and 1.8 s after this (dev VM), and 16 workers on 16 cores
    wait for the slowest. Nothing is written when Python is told not to write bytecode;
    the rewriting uses pytest's own functions (private: any failure leaves the workers to do it,
    as before), and files whose bytecode is current are skipped."""
    if sys.dont_write_bytecode or not hasattr(os, "fork") or threading.active_count() > 1:
        return
    import fnmatch
    import importlib.util
    here = Path(__file__).resolve().parent
    pats = config.getini("python_files")
    rewrite = config.getoption("assertmode", "rewrite") == "rewrite"
    files = [p for p in here.glob("*.py") if p.name != "conftest.py"]
    spec = importlib.util.find_spec("funcgrad")
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            files += Path(root).rglob("*.py")
    # pytest rewrites every module whose name matches python_files (funcgrad/test_util.py too)
    jobs = [("test" if rewrite and any(fnmatch.fnmatch(p.name, pat) for pat in pats) else "py",
             p) for p in files]
    jobs.sort(key=lambda j: -j[1].stat().st_size)   # dealt largest first, round robin
    n = min(len(jobs), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1)
    pids = []
    for i in range(n):
        pid = os.fork()
        if pid == 0:   # the child: compile its share, leave without pytest's clean-up
            try:
                for kind, path in jobs[i::n]:
                    _compile(config, kind, path)
            finally:
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)


def _compile(config, kind: str, path: Path) -> None:
    """Write `path`'s bytecode unless current: pytest's assertion-rewritten form for a test
    module (`kind` "test"), Python's own otherwise."""
    try:
        if kind == "py":
            import compileall
            compileall.compile_file(str(path), quiet=2)
            return
        from _pytest.assertion import rewrite as rw
        cache_dir = rw.get_cache_dir(path)
        pyc = cache_dir / (path.name[:-3] + rw.PYC_TAIL)
        if rw._read_pyc(path, pyc) is None and rw.try_makedirs(cache_dir):
            source, code = rw._rewrite_test(path, config)
            rw._write_pyc(config.stash[rw.assertstate_key], code, source, pyc)
    except Exception:  # noqa: BLE001, S110 - best effort: the worker compiles it on import
        pass
