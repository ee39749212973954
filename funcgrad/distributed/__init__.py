"""Several processes, one GPU each: rendezvous, NCCL collectives on pytrees, gradient buckets.

JAX's `jax.distributed` names (initialize, shutdown, is_initialized) plus process-level
collectives (all_reduce, all_gather, reduce_scatter, broadcast, barrier). docs/distributed.md
describes the design; `python -m funcgrad.distributed.launch -n N script.py` starts a job.
"""
from funcgrad.distributed.buckets import BUCKET_BYTES, BucketPlan
from funcgrad.distributed.comm import (
    all_gather,
    all_reduce,
    broadcast,
    communicator,
    reduce_scatter,
)
from funcgrad.distributed.process import (
    barrier,
    blocking_key_value_get,
    initialize,
    is_initialized,
    key_value_set,
    process_count,
    process_index,
    shutdown,
)
from funcgrad.distributed.rendezvous import RendezvousError

sync_global_devices = barrier   # JAX's multihost_utils name

__all__ = ["BUCKET_BYTES", "BucketPlan", "RendezvousError", "all_gather", "all_reduce",
           "barrier", "blocking_key_value_get", "broadcast", "communicator", "initialize",
           "is_initialized", "key_value_set", "process_count", "process_index",
           "reduce_scatter", "shutdown", "sync_global_devices"]
