"""funcgrad.distributed: rendezvous between real processes, failures, env-var start-up, the
launcher, gradient buckets, single-process collectives; NCCL on a real GPU (cuda marker)."""
from __future__ import annotations

import doctest
import itertools
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
import funcgrad.distributed as dist
from funcgrad.distributed import BucketPlan, RendezvousError, launch, rendezvous

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _spawn(code: str, ranks, port: int, n: int, timeout: float, **env):
    """Start one `python -c code` per rank (argv: rank n port timeout)."""
    return {r: subprocess.Popen([sys.executable, "-c", HEAD + textwrap.dedent(code), str(r), str(n),
                                 str(port), str(timeout)], env=_env(**env), cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r in ranks}


def _results(procs, limit=60):
    out = {}
    for r, p in procs.items():
        so, se = p.communicate(timeout=limit)
        lines = [ln for ln in so.splitlines() if ln.startswith("{")]
        out[r] = (p.returncode, json.loads(lines[-1]) if lines else None, se)
    return out


HEAD = """
import json, os, sys, time
import funcgrad, funcgrad.distributed as dist
rank, n, port, timeout = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
def init():
    dist.initialize(f"127.0.0.1:{port}", n, rank, initialization_timeout=timeout)
"""


def test_processes_rendezvous_exchange_values_and_barrier():
    code = """
    init()
    dist.key_value_set(f"rank{rank}", str(rank * rank))
    dist.barrier("exchanged")
    seen = [dist.blocking_key_value_get(f"rank{r}", 5000) for r in range(n)]
    dist.barrier("exchanged")   # a name used again is a new barrier
    try:
        dist.all_reduce({"g": funcgrad.device_put([1.0, 2.0], "cpu")})
        err = ""
    except RuntimeError as e:
        err = str(e)
    info = {"seen": seen, "index": funcgrad.process_index(), "count": funcgrad.process_count(),
            "indices": funcgrad.process_indices(), "err": err,
            "nvls": os.environ.get("NCCL_NVLS_ENABLE")}
    dist.shutdown()
    print(json.dumps(dict(info, after=[dist.is_initialized(), funcgrad.process_count()])))
    """
    res = _results(_spawn(code, range(3), launch.free_port(), 3, 20))
    for r, (rc, info, err) in res.items():
        assert rc == 0, err
        assert info["seen"] == ["0", "1", "4"] and info["index"] == r and info["count"] == 3
        assert info["indices"] == [0, 1, 2] and info["after"] == [False, 1]
        assert "need the CUDA backend with NCCL" in info["err"] and "on the CPU" in info["err"]
        assert info["nvls"] == "0"


@pytest.mark.parametrize("how", ["crash", "exit"])
def test_a_process_that_leaves_early_makes_the_others_raise(how):
    # "crash": os._exit without shutdown (the connection drops); "exit": a normal interpreter
    # exit (atexit leaves the job cleanly but the others' next barrier cannot complete)
    leave = "os._exit(3)" if how == "crash" else "sys.exit(0)"
    code = f"""
    init()
    if rank == 1:
        {leave}
    t0 = time.monotonic()
    try:
        dist.barrier("after", timeout=timeout)
        msg = ""
    except dist.RendezvousError as e:
        msg = str(e)
    print(json.dumps({{"msg": msg, "seconds": time.monotonic() - t0}}))
    os._exit(0)
    """
    res = _results(_spawn(code, range(2), launch.free_port(), 2, 4))
    rc, info, err = res[0]
    assert rc == 0, err
    assert "process 1" in info["msg"] or "processes [1]" in info["msg"], info
    assert info["seconds"] < 4.5
    if how == "crash":
        assert "failed" in info["msg"]
    else:
        assert "shut down before reaching barrier 'after'" in info["msg"]


def test_a_process_that_never_arrives_is_named_after_the_timeout():
    code = """
    t0 = time.monotonic()
    try:
        init()
        msg = ""
    except dist.RendezvousError as e:
        msg = str(e)
    print(json.dumps({"msg": msg, "seconds": time.monotonic() - t0,
                      "init": dist.is_initialized()}))
    """
    res = _results(_spawn(code, range(2), launch.free_port(), 3, 2))
    for rc, info, err in res.values():
        assert rc == 0, err
        assert "barrier 'initialize' timed out" in info["msg"] and "[2]" in info["msg"], info
        assert 1.5 < info["seconds"] < 5 and not info["init"]


def test_the_coordinator_exiting_makes_the_others_raise():
    code = """
    init()
    if rank == 0:   # (after the others got their answer to initialize's barrier)
        time.sleep(0.5)
        os._exit(0)
    try:
        dist.barrier("after", timeout=timeout)
        msg = ""
    except dist.RendezvousError as e:
        msg = str(e)
    print(json.dumps({"msg": msg}))
    os._exit(0)
    """
    rc, info, err = _results(_spawn(code, range(2), launch.free_port(), 2, 4))[1]
    assert rc == 0, err
    assert "coordinator" in info["msg"] or "process 0" in info["msg"], info


def test_launcher_sets_torchrun_variables_and_env_initialization(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        import funcgrad, funcgrad.distributed as dist
        dist.initialize(initialization_timeout=20)     # everything from the environment
        r = funcgrad.process_index()
        assert r == int(os.environ["RANK"]) and funcgrad.process_count() == 2
        assert os.environ["CUDA_VISIBLE_DEVICES"] == os.environ["LOCAL_RANK"]
        assert os.environ["NCCL_NVLS_ENABLE"] == "0"
        dist.key_value_set(f"k{r}", "x")
        dist.blocking_key_value_get(f"k{1 - r}", 10000)
        dist.shutdown()
        sys.exit(int(sys.argv[1]) if r == 1 else 0)
    """))
    env = _env()
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("NCCL_NVLS_ENABLE", None)
    assert launch.launch(2, [sys.executable, str(script), "0"], env=env) == 0
    assert launch.launch(2, [sys.executable, str(script), "5"], env=env, grace=5) == 5


# in-process: arguments and protocol errors ------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    ({"num_processes": 0}, "at least 1"),
    ({"num_processes": 2, "process_id": 2, "coordinator_address": "127.0.0.1:1"}, "out of range"),
    ({"num_processes": 2, "process_id": 0}, "coordinator_address"),
    ({"num_processes": 2}, "process_id"),
    ({"num_processes": 2, "process_id": 1, "coordinator_address": "nohost"}, "host:port"),
    ({"num_processes": 2, "process_id": 1, "coordinator_address": "h:x"}, "integer port"),
    ({"num_processes": 2, "process_id": 1, "coordinator_address": "h:0"}, "fixed port"),
    ({"num_processes": 1, "local_device_ids": [0, 1]}, "one GPU per process"),
    ({"num_processes": 1, "initialization_timeout": 0}, "positive"),
    ({}, "num_processes"),
])
def test_initialize_argument_errors(kwargs, match, monkeypatch):
    for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ValueError, match=match):
        dist.initialize(**kwargs)
    assert not dist.is_initialized()


def test_initialize_twice_and_single_process_round_trip(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    dist.initialize(initialization_timeout=5)
    try:
        with pytest.raises(RuntimeError, match="already called"):
            dist.initialize(num_processes=1)
        assert funcgrad.process_count() == 1 and funcgrad.host_ids() == [0]
        with pytest.raises(RendezvousError, match="'missing' was not set within 0.2 s"):
            dist.blocking_key_value_get("missing", 200)
        with pytest.raises(TypeError, match="strings"):
            dist.key_value_set("k", 3)
        dist.barrier()
    finally:
        dist.shutdown()
    assert not dist.is_initialized()
    dist.shutdown()   # a second shutdown is a no-op


def test_server_rejects_mismatched_and_duplicate_processes():
    s = rendezvous.Server("127.0.0.1", 0, num_processes=2)
    try:
        with pytest.raises(RendezvousError, match="num_processes=3"):
            rendezvous.Client("127.0.0.1", s.port, 1, 3, timeout=2)
        a = rendezvous.Client("127.0.0.1", s.port, 1, 2, timeout=2)
        with pytest.raises(RendezvousError, match="connected twice"):
            rendezvous.Client("127.0.0.1", s.port, 1, 2, timeout=2)
        t0 = time.monotonic()
        with pytest.raises(RendezvousError, match=r"processes \[0\] of 2 did not arrive; "
                                                  r"processes \[0\] never connected"):
            a.barrier("b", timeout=0.3)
        assert time.monotonic() - t0 < 3
        a.close()
    finally:
        s.close()
    with pytest.raises(RendezvousError, match="could not reach the coordinator"):
        rendezvous.Client("127.0.0.1", s.port, 0, 1, timeout=0.3)


# buckets --------------------------------------------------------------------------------------

_shapes = st.lists(st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple), min_size=0,
                   max_size=7)


@given(_shapes, st.lists(st.sampled_from(["float32", "float64", "int32"]), min_size=7,
                         max_size=7), st.integers(1, 64))
def test_bucket_flatten_unflatten_round_trip(shapes, dtypes, bucket_bytes):
    rng = np.random.default_rng(len(shapes))
    tree = {f"p{i}": (rng.standard_normal(s) * 10).astype(dt)
            for i, (s, dt) in enumerate(zip(shapes, dtypes))}
    plan = BucketPlan.for_tree(tree, bucket_bytes=bucket_bytes)
    flat = plan.flatten(tree)
    assert len(flat) == len(plan.buckets) and all(f.ndim == 1 for f in flat)
    for (dt, size), f in zip(plan.buckets, flat):
        assert f.dtype == dt and f.shape == (size,)
    back = plan.unflatten(flat)
    assert back.keys() == tree.keys()
    for k, v in tree.items():
        assert back[k].shape == v.shape and back[k].dtype == v.dtype
        np.testing.assert_array_equal(np.asarray(back[k]), v)
    # a bucket over the limit holds a single leaf; leaves in a bucket do not overlap
    for b, (dt, size) in enumerate(plan.buckets):
        members = [(off, a.size) for a, (bb, off) in zip(plan.avals, plan.slots) if bb == b]
        if size * dt.itemsize > bucket_bytes:
            assert len([m for m in members if m[1]]) <= 1
        ends = sorted((o, o + n) for o, n in members if n)
        assert all(e0 <= s1 for (_, e0), (s1, _) in itertools.pairwise(ends))
    assert plan.nbytes() == sum(t.nbytes for t in tree.values())


def test_bucket_plan_groups_by_dtype_and_checks_shapes():
    tree = [np.ones(3, np.float32), np.ones(2, np.int32), np.ones(5, np.float32)]
    plan = BucketPlan.for_tree(tree)
    assert [(dt.name, n) for dt, n in plan.buckets] == [("float32", 8), ("int32", 2)]
    assert plan.slots == [(0, 0), (1, 0), (0, 3)]
    assert "3 leaves" in repr(plan)
    with pytest.raises(ValueError, match="shapes differ"):
        plan.flatten([np.ones(4, np.float32), np.ones(2, np.int32), np.ones(5, np.float32)])
    with pytest.raises(ValueError, match="made for"):
        plan.flatten({"a": 1})
    with pytest.raises(ValueError, match="expected 2 buckets"):
        plan.unflatten([np.ones(8)])
    with pytest.raises(ValueError, match="positive"):
        BucketPlan.for_tree(tree, bucket_bytes=0)


# single process ---------------------------------------------------------------------------------

def test_single_process_collectives_keep_the_values():
    g = {"w": funcgrad.numpy.arange(4.0), "b": np.float32(2.0)}
    assert dist.all_reduce(g) is g and dist.all_reduce(g, "sum") is g
    assert dist.broadcast(g) is g and dist.reduce_scatter(g) is g
    gathered = dist.all_gather(g)
    assert gathered["w"].shape == (1, 4) and gathered["b"].shape == (1,)
    assert dist.all_gather(g, tiled=True)["w"].shape == (4,)
    with pytest.raises(ValueError, match="unknown op"):
        dist.all_reduce(g, op="avg")
    with pytest.raises(ValueError, match="root 1"):
        dist.broadcast(g, root=1)
    with pytest.raises(TypeError, match="between jitted calls"):
        funcgrad.jit(lambda x: dist.all_reduce(x))(np.ones(2))


def test_doctests():
    for mod in (dist.buckets, dist.comm, dist.process, dist.rendezvous):
        res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert res.failed == 0, mod.__name__


# CUDA -----------------------------------------------------------------------------------------

def _cuda_usable():
    import funcgrad.cuda as fcuda
    return fcuda.usable() or os.environ.get("FUNCGRAD_REQUIRE_GPU") == "1"


def _nccl_or_skip():
    from funcgrad.cuda import nccl, runtime
    if runtime.sim_requested():
        pytest.skip("NCCL does not exist under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
    ok, why = nccl.available()
    if not ok and os.environ.get("FUNCGRAD_REQUIRE_GPU") != "1":
        pytest.skip(why)
    assert ok, why
    return nccl


@pytest.mark.cuda
@pytest.mark.skipif(not _cuda_usable(), reason="no GPU and no CUDA simulator")
def test_buckets_of_cuda_arrays_pack_on_device_and_unpack_as_views():
    tree = [funcgrad.device_put(np.arange(6.0, dtype=np.float32).reshape(2, 3), "cuda"),
            funcgrad.device_put(np.float32(7.0), "cuda"),
            funcgrad.device_put(np.zeros((0, 2), np.float32), "cuda"),
            funcgrad.device_put(np.arange(5, dtype=np.int32), "cuda").T,
            funcgrad.device_put(np.ones((3, 2), np.float32), "cuda").T]   # a strided view
    plan = BucketPlan.for_tree(tree, bucket_bytes=16)
    flat = plan.flatten(tree)
    assert all(f.device == "cuda" for f in flat)
    back = plan.unflatten(flat)
    for a, b in zip(tree, back):
        assert b.device == "cuda" and b.shape == a.shape
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a))
    assert back[0].buf.block is flat[0].buf.block     # a view, no copy


@pytest.mark.cuda
@pytest.mark.skipif(not _cuda_usable(), reason="no GPU and no CUDA simulator")
def test_nccl_one_process_collectives_and_graph_capture():
    nccl = _nccl_or_skip()
    from funcgrad.cuda import arrays, runtime
    dist.initialize(num_processes=1, initialization_timeout=30)
    try:
        assert os.environ["NCCL_NVLS_ENABLE"] == "0"
        rng = np.random.default_rng(0)
        host = {f"l{i}": rng.standard_normal((i + 1, 7)).astype(np.float32) for i in range(12)}
        host["n"] = np.arange(3, dtype=np.int32)
        tree = funcgrad.device_put(host, "cuda")
        for op in ("mean", "sum", "max"):
            t = {k: v for k, v in tree.items() if op != "mean" or k != "n"}
            out = dist.all_reduce(t, op=op, bucket_bytes=64)   # several buckets
            for k in t:
                assert out[k].device == "cuda"
                np.testing.assert_array_equal(np.asarray(out[k]), host[k])
        with pytest.raises(TypeError, match="floating-point"):
            dist.all_reduce(tree, op="mean")
        np.testing.assert_array_equal(np.asarray(dist.all_gather(tree)["l2"]), host["l2"][None])
        np.testing.assert_array_equal(np.asarray(dist.broadcast(tree)["l3"]), host["l3"])
        np.testing.assert_array_equal(np.asarray(dist.reduce_scatter(tree)["l4"]), host["l4"])
        comm = dist.communicator()
        assert comm.nranks == 1 and comm.rank == 0
        # the all-reduce is issued on funcgrad's launch stream, so a CUDA graph captures it
        from cuda.bindings import driver as cb
        x = arrays.from_host(np.arange(8, dtype=np.float32))
        y = arrays.pool().empty((8,), np.float32)
        err, handle = cb.cuStreamCreate(cb.CUstream_flags.CU_STREAM_NON_BLOCKING.value)
        assert int(err) == 0
        runtime.load().synchronize()
        runtime._stream = runtime.load().external_stream(int(handle))
        try:
            (err,) = cb.cuStreamBeginCapture(
                handle, cb.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            assert int(err) == 0
            comm.all_reduce(x, "sum", out=y)
            err, graph = cb.cuStreamEndCapture(handle)
            assert int(err) == 0
        finally:
            runtime._stream = None
        err, gexec = cb.cuGraphInstantiate(graph, 0)
        assert int(err) == 0
        assert int(cb.cuGraphLaunch(gexec, handle)[0]) == 0
        assert int(cb.cuStreamSynchronize(handle)[0]) == 0
        np.testing.assert_array_equal(arrays.to_host(y), np.arange(8, dtype=np.float32))
        assert nccl.available()[1].startswith("NCCL 2.")
    finally:
        dist.shutdown()


def _gpu_count():
    try:
        import funcgrad.cuda as fcuda
        from funcgrad.cuda import runtime
        if runtime.sim_requested() or not fcuda.usable():
            return 0
        return len(runtime.load().gpus)
    except Exception:   # noqa: BLE001
        return 0


@pytest.mark.cuda
@pytest.mark.skipif(_gpu_count() < 2, reason="needs 2 GPUs (one process per GPU)")
def test_nccl_two_processes_mean_gradients(tmp_path):
    _nccl_or_skip()
    script = tmp_path / "two.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, funcgrad, funcgrad.distributed as dist
        dist.initialize(initialization_timeout=60)
        r = funcgrad.process_index()
        g = funcgrad.device_put({"a": np.full((5, 3), r + 1.0, np.float32),
                                 "b": np.arange(4, dtype=np.float32) * (r + 1)}, "cuda")
        m = dist.all_reduce(g, "mean")
        assert np.allclose(np.asarray(m["a"]), 1.5) and np.allclose(np.asarray(m["b"]),
                                                                      np.arange(4) * 1.5)
        s = dist.all_gather(g)["a"]
        assert np.asarray(s).shape == (2, 5, 3) and np.asarray(s)[1, 0, 0] == 2.0
        rs = dist.reduce_scatter(funcgrad.device_put(np.ones((4, 2), np.float32), "cuda"))
        assert np.asarray(rs).shape == (2, 2) and np.all(np.asarray(rs) == 2.0)
        dist.shutdown()
    """))
    assert launch.launch(2, [sys.executable, str(script)], env=_env(), grace=10) == 0


# the example ------------------------------------------------------------------------------------

def test_train_gpt_data_parallel_one_process_matches_the_plain_run(tmp_path, monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import train_gpt
    monkeypatch.setattr(train_gpt.gpt, "SMALL", train_gpt.gpt.Config(d=32, layers=1, heads=2,
                                                                      ctx=16))
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    runs = {}
    for mode in ("plain", "dp"):
        hist = tmp_path / f"{mode}.json"
        train_gpt.main(["--device", "cpu", "--config", "small", "--steps", "6", "--batch", "4",
                        "--eval-every", "100", "--eval-batches", "1", "--sample-bytes", "2",
                        "--log-every", "1", "--checkpoint", str(tmp_path / f"{mode}.st"),
                        "--plot", str(tmp_path / "p.png"), "--history", str(hist)]
                       + (["--data-parallel"] if mode == "dp" else []))
        runs[mode] = json.loads(hist.read_text())
    funcgrad.config.update("default_device", None)
    assert not dist.is_initialized()
    assert len(runs["dp"]["train"]) == 6
    np.testing.assert_allclose([v for _, v in runs["dp"]["train"]],
                               [v for _, v in runs["plain"]["train"]], rtol=1e-6)
