"""Multi-process start-up in JAX's style: initialize, shutdown, process_index and process_count."""
from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading

from funcgrad.distributed.rendezvous import Client, RendezvousError, Server

_state = None            # the _Job of this process once initialize() ran
_lock = threading.Lock()


class _Job:
    __slots__ = ("__weakref__", "address", "client", "comms", "num_processes", "process_id",
                 "server", "timeout")

    def __init__(self, address, num_processes, process_id, timeout):
        self.address, self.num_processes = address, num_processes
        self.process_id, self.timeout = process_id, timeout
        self.client = self.server = None
        self.comms: list = []    # NCCL communicators to abort when a process fails


def _env_int(name):
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"environment variable {name}={v!r} is not an integer") from None


def _parse_address(address: str):
    host, sep, port = str(address).rpartition(":")
    if not sep or not host:
        raise ValueError(f"coordinator_address must be 'host:port', got {address!r}")
    try:
        port = int(port)
    except ValueError:
        raise ValueError(f"coordinator_address {address!r} has no integer port") from None
    if not 0 <= port < 65536:
        raise ValueError(f"coordinator_address {address!r}: port {port} is out of range")
    return host.strip("[]"), port


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, local_device_ids=None,
               initialization_timeout: float = 300, *, heartbeat_timeout_seconds: float = 20):
    """Join a job of `num_processes` processes (JAX's `jax.distributed.initialize`).

    Process 0 serves a small rendezvous (a key-value store and barriers, not a data transport)
    at `coordinator_address`; every process connects to it, and `initialize` returns once all
    of them have, or raises `RendezvousError` naming the processes that did not arrive within
    `initialization_timeout` seconds. Arguments left out are read from a torchrun-style
    environment: `MASTER_ADDR` and `MASTER_PORT`, `WORLD_SIZE`, `RANK`, and `LOCAL_RANK` (the
    GPU this process drives, made its only visible GPU: call `initialize` before any GPU work).
    With `num_processes=1` the coordinator may be left out (a local port is picked).

    A process that exits without `shutdown()` or stops sending heartbeats for
    `heartbeat_timeout_seconds` is reported as failed: the others' barriers and collectives
    raise naming it, and NCCL communicators are aborted rather than left hanging. NCCL's
    NVLink multicast (NVLS) is kept off: `NCCL_NVLS_ENABLE=0` is set unless already set.

    Example:
        >>> import funcgrad
        >>> funcgrad.distributed.initialize(num_processes=1, process_id=0)
        >>> funcgrad.process_index(), funcgrad.process_count()
        (0, 1)
        >>> funcgrad.distributed.shutdown()
    """
    global _state
    with _lock:
        if _state is not None:
            raise RuntimeError("funcgrad.distributed.initialize was already called in this "
                               "process (call shutdown() first to join another job)")
        if num_processes is None:
            num_processes = _env_int("WORLD_SIZE")
        if process_id is None:
            process_id = _env_int("RANK")
        if local_device_ids is None and _env_int("LOCAL_RANK") is not None:
            local_device_ids = [_env_int("LOCAL_RANK")]
        if coordinator_address is None and os.environ.get("MASTER_ADDR"):
            port = os.environ.get("MASTER_PORT")
            if not port:
                raise ValueError("MASTER_ADDR is set but MASTER_PORT is not")
            coordinator_address = f"{os.environ['MASTER_ADDR']}:{port}"
        if num_processes is None:
            raise ValueError("initialize needs num_processes (or WORLD_SIZE in the "
                             "environment, as torchrun sets it)")
        num_processes = int(num_processes)
        if num_processes < 1:
            raise ValueError(f"num_processes must be at least 1, got {num_processes}")
        if process_id is None:
            if num_processes != 1:
                raise ValueError("initialize needs process_id (or RANK in the environment)")
            process_id = 0
        process_id = int(process_id)
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process_id {process_id} is out of range for "
                             f"num_processes={num_processes}")
        if coordinator_address is None:
            if num_processes != 1:
                raise ValueError("initialize needs coordinator_address ('host:port' of process "
                                 "0), or MASTER_ADDR and MASTER_PORT in the environment")
            coordinator_address = "127.0.0.1:0"
        host, port = _parse_address(coordinator_address)
        if port == 0 and num_processes != 1:
            raise ValueError("coordinator_address needs a fixed port when num_processes > 1 "
                             "(the other processes must know where to connect)")
        if initialization_timeout <= 0:
            raise ValueError("initialization_timeout must be positive")
        _select_gpu(local_device_ids)
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")   # NVLink multicast stays off
        job = _Job(f"{host}:{port}", num_processes, process_id, float(initialization_timeout))
        try:
            if process_id == 0:
                bind = host if host in ("127.0.0.1", "localhost", "::1") else ""
                job.server = Server(bind, port, num_processes, heartbeat_timeout_seconds)
                port = job.server.port
                job.address = f"{host}:{port}"
            job.client = Client(host, port, process_id, num_processes, job.timeout,
                                heartbeat_interval=min(2.0, heartbeat_timeout_seconds / 4),
                                on_failure=lambda why: _on_failure(job, why))
            job.client.barrier("initialize", job.timeout)
        except BaseException:
            _close(job, leave=False)
            raise
        _state = job
    atexit.register(_at_exit, job)


def _select_gpu(local_device_ids):
    """Make the one GPU this process drives its only visible one (before CUDA starts)."""
    if local_device_ids is None:
        return
    ids = [int(i) for i in ([local_device_ids] if isinstance(local_device_ids, int)
                            else local_device_ids)]
    if len(ids) != 1:
        raise ValueError(f"local_device_ids={ids}: funcgrad drives one GPU per process; "
                         "launch one process per GPU (each with its LOCAL_RANK)")
    (i,) = ids
    if i < 0:
        raise ValueError(f"local device id {i} is negative")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    listed = [v.strip() for v in visible.split(",") if v.strip()] if visible else None
    if listed is not None and len(listed) == 1:
        return   # already pinned to one GPU (a cluster scheduler did it): drive that one
    target = listed[i] if listed is not None and i < len(listed) else str(i)
    if listed is not None and i >= len(listed):
        raise ValueError(f"local device id {i} is not among CUDA_VISIBLE_DEVICES={visible!r}")
    if "numba.cuda" in sys.modules and i != 0:
        raise RuntimeError("funcgrad.distributed.initialize must run before the first GPU use "
                           f"(CUDA has started, so GPU {i} can no longer be selected)")
    if "numba.cuda" not in sys.modules:
        os.environ["CUDA_VISIBLE_DEVICES"] = target


def _on_failure(job, why):
    """Watch thread: another process failed. Abort NCCL communicators (a collective waiting on
    a dead peer would otherwise wait forever) and, since device code cannot raise, end this
    process with an error if it is still blocked a few seconds later."""
    if not job.comms:
        return    # no device collectives in flight: the next rendezvous call raises
    sys.stderr.write(f"funcgrad.distributed: {why}; aborting NCCL communicators\n")
    sys.stderr.flush()
    for comm in list(job.comms):
        with contextlib.suppress(Exception):   # best effort while failing
            comm.abort()

    def _exit_later():
        import time
        time.sleep(5.0)
        sys.stderr.write(f"funcgrad.distributed: exiting (exit code 1): {why}\n")
        sys.stderr.flush()
        os._exit(1)
    threading.Thread(target=_exit_later, daemon=True).start()


def _close(job, leave):
    for comm in list(job.comms):
        with contextlib.suppress(Exception):
            comm.destroy()
    job.comms.clear()
    if job.client is not None:
        job.client.close(leave=leave)
    if job.server is not None:
        if leave:
            job.server.wait_all_left(10.0)
        job.server.close()


def _at_exit(job):
    """At interpreter exit: leave without waiting for the others (a clean exit is no failure,
    but a process that leaves early makes the others' later barriers fail, naming it)."""
    global _state
    if _state is job:
        _state = None
        _close(job, leave=True)


def shutdown():
    """Leave the job: wait for every process at a last barrier, then close the connections
    (process 0 keeps the coordinator up until the others have left). No-op if not initialized.

    Example:
        >>> import funcgrad
        >>> funcgrad.distributed.shutdown()   # not initialized: nothing to do
    """
    global _state
    with _lock:
        job, _state = _state, None
    if job is None:
        return
    try:
        if job.client.failure is None:
            job.client.barrier("shutdown", job.timeout)
    finally:
        _close(job, leave=True)


def is_initialized() -> bool:
    """True between initialize() and shutdown().

    Example:
        >>> import funcgrad
        >>> funcgrad.distributed.is_initialized()
        False
    """
    return _state is not None


def process_index() -> int:
    """This process's index in the job (0 when not initialized)."""
    return _state.process_id if _state is not None else 0


def process_count() -> int:
    """The number of processes in the job (1 when not initialized)."""
    return _state.num_processes if _state is not None else 1


def job():
    """The current job (rendezvous client, NCCL communicators); RuntimeError if none."""
    if _state is None:
        raise RuntimeError("funcgrad.distributed.initialize() has not been called")
    return _state


def check_alive():
    """Raise RendezvousError if another process of the job has failed."""
    if _state is not None and _state.client.failure is not None:
        raise RendezvousError(_state.client.failure)


def barrier(name: str = "barrier", timeout: float | None = None):
    """Wait until every process reached this barrier (JAX's `sync_global_devices`); raises
    `RendezvousError` naming the processes that failed or did not arrive within timeout
    (default: initialize's timeout). No-op in a single process that was not initialized.

    Example:
        >>> import funcgrad
        >>> funcgrad.distributed.barrier("start")
    """
    if _state is None:
        return
    check_alive()
    _state.client.barrier(name, _state.timeout if timeout is None else timeout)


def key_value_set(key: str, value: str):
    """Store a string under key in the rendezvous, for every process to read (JAX's
    distributed client `key_value_set`). For small start-up values, not for tensors.

    Example:
        >>> import funcgrad
        >>> funcgrad.distributed.initialize(num_processes=1)
        >>> funcgrad.distributed.key_value_set("run", "a1")
        >>> funcgrad.distributed.blocking_key_value_get("run", 1000)
        'a1'
        >>> funcgrad.distributed.shutdown()
    """
    if not isinstance(value, str):
        raise TypeError(f"key_value_set stores strings, got {type(value).__name__}")
    check_alive()
    job().client.set(str(key), value)


def blocking_key_value_get(key: str, timeout_in_ms: int) -> str:
    """The string stored under key, waiting up to timeout_in_ms for some process to set it;
    `RendezvousError` on timeout or when a process of the job failed."""
    check_alive()
    return job().client.get(str(key), timeout_in_ms / 1000.0)
