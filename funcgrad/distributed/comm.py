"""Collectives between processes on pytrees of arrays: NCCL on GPUs, bucketed.

These run between jitted calls (a jitted grad step, then `all_reduce`, then a jitted update),
on the stream funcgrad launches on, so no host synchronization is added. Inside one process,
across the devices of a `pmap`, use `funcgrad.lax.pmean` & co. instead.
"""
from __future__ import annotations

import numpy as np

from funcgrad.core import Array, Tracer
from funcgrad.tree_util import tree_flatten, tree_map, tree_unflatten
from funcgrad.distributed import process
from funcgrad.distributed.buckets import BUCKET_BYTES, BucketPlan

_plans: dict = {}
NO_TRANSPORT = ("cross-process collectives need the CUDA backend with NCCL (funcgrad has no CPU "
                "transport of its own); {why}. On one host, pmap over virtual CPU devices "
                "(FUNCGRAD_NUM_CPU_DEVICES=N) exercises the same collectives' semantics")


def _backend(leaves, what) -> str:
    """"nccl" (collectives through NCCL) or "local" (one process: the values as they are)."""
    for x in leaves:
        if isinstance(x, Tracer):
            raise TypeError(f"funcgrad.distributed.{what} runs between jitted calls, not inside "
                            "a traced function; inside jit/pmap use funcgrad.lax.psum/pmean")
    on_gpu = any(isinstance(x, Array) and x.device == "cuda" for x in leaves)
    if on_gpu and process.is_initialized():
        from funcgrad.cuda import runtime
        if not runtime.sim_requested():
            return "nccl"
        why = "these arrays are on numba's CUDA simulator, which has no NCCL"
    else:
        why = ("these arrays are on the CPU" if not on_gpu else
               "funcgrad.distributed.initialize() has not been called")
    if process.process_count() == 1:
        return "local"
    raise RuntimeError(NO_TRANSPORT.format(why=why))


def communicator():
    """This process's NCCL communicator, created on first use: process 0 makes the unique id,
    the rendezvous hands it to the others, and every process joins once all are present."""
    job = process.job()
    if not job.comms:
        from funcgrad.cuda import nccl
        process.check_alive()
        key = "nccl/unique_id"
        if job.process_id == 0:
            job.client.set(key, nccl.unique_id())
        uid = job.client.get(key, job.timeout)
        job.client.barrier("nccl", job.timeout)   # all present: ncclCommInitRank cannot hang
        job.comms.append(nccl.Communicator(uid, job.num_processes, job.process_id))
    return job.comms[0]


def _plan(leaves, treedef, bucket_bytes):
    key = (treedef, tuple((tuple(np.shape(x)), np.dtype(x.dtype).str) for x in leaves),
           bucket_bytes)
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) > 64:
            _plans.clear()
        plan = _plans[key] = BucketPlan.for_tree(tree_unflatten(treedef, leaves), bucket_bytes)
    return plan


def _as_arrays(leaves):
    return [x if isinstance(x, Array) or hasattr(x, "dtype") else np.asarray(x) for x in leaves]


def all_reduce(tree, op: str = "mean", *, bucket_bytes: int = BUCKET_BYTES):
    """Reduce every leaf over the processes ("mean", "sum", "max", "min", "prod"); every
    process gets the result (torch's `all_reduce`, JAX's `pmean` across processes).

    Leaves are packed into ~`bucket_bytes` buckets per dtype, one NCCL all-reduce per bucket,
    and the results are views into the buckets. In a single process (not initialized, or
    initialized with one process on the CPU) the tree comes back as it is.

    Example:
        >>> import funcgrad, numpy as np
        >>> g = {"w": np.ones(3, np.float32)}
        >>> funcgrad.distributed.all_reduce(g, op="mean")["w"]   # one process
        array([1., 1., 1.], dtype=float32)
    """
    if op not in ("mean", "sum", "max", "min", "prod"):
        raise ValueError(f"all_reduce: unknown op {op!r}; expected 'mean', 'sum', 'max', "
                         "'min' or 'prod'")
    leaves, treedef = tree_flatten(tree)
    if not leaves or _backend(leaves, "all_reduce") == "local":
        return tree
    process.check_alive()
    leaves = _as_arrays(leaves)
    plan = _plan(leaves, treedef, bucket_bytes)
    if op == "mean" and any(not np.issubdtype(dt, np.inexact) for dt, _ in plan.buckets):
        raise TypeError("all_reduce(op='mean') needs floating-point leaves (NCCL's average of "
                        "integers truncates); cast them, or use op='sum'")
    comm = communicator()
    buckets = plan.flatten(tree_unflatten(treedef, leaves))
    for b in buckets:
        comm.all_reduce(b.buf, op, out=b.buf)
    return plan.unflatten(buckets)


def broadcast(tree, root: int = 0, *, bucket_bytes: int = BUCKET_BYTES):
    """Process `root`'s leaves on every process (JAX's `broadcast_one_to_all`), e.g. to start
    every process from the same parameters.

    Example:
        >>> import funcgrad, numpy as np
        >>> funcgrad.distributed.broadcast({"w": np.arange(2.0)})["w"]
        array([0., 1.])
    """
    leaves, treedef = tree_flatten(tree)
    if not 0 <= root < process.process_count():
        raise ValueError(f"broadcast: root {root} is out of range for "
                         f"{process.process_count()} processes")
    if not leaves or _backend(leaves, "broadcast") == "local":
        return tree
    process.check_alive()
    leaves = _as_arrays(leaves)
    plan = _plan(leaves, treedef, bucket_bytes)
    comm = communicator()
    buckets = plan.flatten(tree_unflatten(treedef, leaves))
    for b in buckets:
        comm.broadcast(b.buf, root, out=b.buf)
    return plan.unflatten(buckets)


def all_gather(tree, tiled: bool = False):
    """Every process's leaves stacked along a new leading axis (JAX's `process_allgather`);
    with tiled=True concatenated along the existing leading axis instead.

    Example:
        >>> import funcgrad, numpy as np
        >>> funcgrad.distributed.all_gather(np.float32(3.0)).shape   # one process
        (1,)
    """
    leaves, treedef = tree_flatten(tree)
    if not leaves:
        return tree
    mode = _backend(leaves, "all_gather")
    process.check_alive()
    if mode == "local":
        import funcgrad.numpy as fnp
        return tree_map(lambda x: fnp.asarray(x) if tiled else fnp.asarray(x)[None], tree)
    comm = communicator()
    out = []
    for x in _as_arrays(leaves):
        x = _on_gpu(x)
        g = comm.all_gather(_contiguous(x))
        y = Array(g, _aval(g), "cuda")
        if tiled:
            if not x.shape:
                raise ValueError("all_gather(tiled=True) needs arrays of at least one axis")
            y = y.reshape((-1,) + tuple(x.shape[1:]))
        out.append(y)
    return tree_unflatten(treedef, out)


def reduce_scatter(tree, op: str = "sum"):
    """Reduce every leaf over the processes and keep this process's block of its leading axis
    (length / process_count rows: JAX's `psum_scatter(..., tiled=True)` across processes).

    Example:
        >>> import funcgrad, numpy as np
        >>> funcgrad.distributed.reduce_scatter(np.arange(4.0))   # one process: all of it
        array([0., 1., 2., 3.])
    """
    leaves, treedef = tree_flatten(tree)
    if not leaves or _backend(leaves, "reduce_scatter") == "local":
        return tree
    process.check_alive()
    comm = communicator()
    out = []
    for x in _as_arrays(leaves):
        r = comm.reduce_scatter(_contiguous(_on_gpu(x)), op)
        out.append(Array(r, _aval(r), "cuda"))
    return tree_unflatten(treedef, out)


def _on_gpu(x):
    if isinstance(x, Array) and x.device == "cuda":
        return x
    from funcgrad.api.devices import device_put
    return device_put(np.asarray(x), "cuda")


def _contiguous(x):
    from funcgrad.cuda.elementwise import contiguous
    return contiguous(x.buf)


def _aval(buf):
    from funcgrad.core import ShapedArray
    return ShapedArray(buf.shape, buf.dtype)
