"""Gradient bucketing: many small leaves packed into a few contiguous buffers, and back.

One NCCL call per gradient leaf would pay NCCL's per-call latency (tens of microseconds) a
hundred times per step for a GPT; one call per ~25 MB bucket pays it a few times and keeps the
transfers in NCCL's bandwidth-bound regime (the same choice as PyTorch DDP's 25 MB buckets).
Leaves are grouped by dtype in tree order; a leaf larger than a bucket gets a bucket of its own.
On the GPU, packing is one device-to-device copy per leaf on the launch stream, and unpacking
returns views into the bucket (no copy).
"""
from __future__ import annotations

import numpy as np

from funcgrad.core import Array, ShapedArray
from funcgrad.tree_util import tree_flatten, tree_unflatten

BUCKET_BYTES = 25 << 20


class BucketPlan:
    """Where each leaf of a pytree lives in the buckets: `slots[i] = (bucket, offset)` (offset
    in elements), `buckets[b] = (dtype, size)`.

    Example:
        >>> import numpy as np
        >>> tree = {"w": np.ones((2, 3), np.float32), "b": np.zeros(3, np.float32)}
        >>> plan = BucketPlan.for_tree(tree)
        >>> [(b[0].name, b[1]) for b in plan.buckets]
        [('float32', 9)]
        >>> flat = plan.flatten(tree)
        >>> back = plan.unflatten(flat)
        >>> np.asarray(back["w"]).shape, float(np.asarray(flat[0]).sum())
        ((2, 3), 6.0)
    """

    def __init__(self, avals, treedef=None, bucket_bytes: int = BUCKET_BYTES):
        if bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
        self.avals = [ShapedArray(a.shape, a.dtype) for a in avals]
        self.treedef, self.bucket_bytes = treedef, int(bucket_bytes)
        self.buckets: list = []
        self.slots: list = [None] * len(self.avals)
        open_bucket: dict = {}    # dtype -> index of the bucket being filled
        for i, a in enumerate(self.avals):
            n, item = a.size, a.dtype.itemsize
            b = open_bucket.get(a.dtype)
            full = b is not None and self.buckets[b][1] > 0 and \
                (self.buckets[b][1] + n) * item > self.bucket_bytes   # (an empty one takes any)
            if b is None or full:
                b = open_bucket[a.dtype] = len(self.buckets)
                self.buckets.append((a.dtype, 0))
            dt, size = self.buckets[b]
            self.slots[i] = (b, size)
            self.buckets[b] = (dt, size + n)

    @classmethod
    def for_tree(cls, tree, bucket_bytes: int = BUCKET_BYTES) -> BucketPlan:
        """The plan for a pytree of arrays (funcgrad Arrays, numpy arrays or scalars)."""
        leaves, treedef = tree_flatten(tree)
        avals = [ShapedArray(np.shape(x), x.dtype if hasattr(x, "dtype") else
                             np.asarray(x).dtype) for x in leaves]
        return cls(avals, treedef, bucket_bytes)

    def _leaves(self, tree):
        leaves, treedef = tree_flatten(tree)
        if self.treedef is not None and treedef != self.treedef:
            raise ValueError(f"this bucket plan was made for {self.treedef}, got {treedef}")
        if len(leaves) != len(self.avals) or any(
                tuple(np.shape(x)) != a.shape for x, a in zip(leaves, self.avals)):
            raise ValueError("the leaves' shapes differ from the bucket plan's: "
                             f"{[tuple(np.shape(x)) for x in leaves]} vs "
                             f"{[a.shape for a in self.avals]}")
        return leaves

    def flatten(self, tree) -> list:
        """The buckets of a pytree shaped like the plan's: one 1-D array per bucket (funcgrad
        Arrays on the leaves' device; numpy leaves give cpu Arrays)."""
        leaves = self._leaves(tree)
        device = next((x.device for x in leaves if isinstance(x, Array)), "cpu")
        if device == "cuda":
            return self._flatten_cuda(leaves)
        out = [np.empty(size, dt) for dt, size in self.buckets]
        for x, a, (b, off) in zip(leaves, self.avals, self.slots):
            out[b][off:off + a.size] = np.asarray(x, a.dtype).reshape(-1)
        return [Array(o, ShapedArray(o.shape, o.dtype), "cpu") for o in out]

    def _flatten_cuda(self, leaves):
        from funcgrad.cuda import arrays, nccl
        from funcgrad.cuda.elementwise import contiguous
        bufs = [arrays.pool().empty((size,), dt) for dt, size in self.buckets]
        for x, a, (b, off) in zip(leaves, self.avals, self.slots):
            if not isinstance(x, Array) or x.device != "cuda":
                from funcgrad.api.devices import device_put
                x = device_put(np.asarray(x, a.dtype), "cuda")
            src = contiguous(x.buf)
            if src.dtype != a.dtype:
                raise TypeError(f"leaf of dtype {src.dtype} where the plan has {a.dtype}")
            nccl.copy_into(bufs[b], off, src)
        return [Array(buf, ShapedArray(buf.shape, buf.dtype), "cuda") for buf in bufs]

    def unflatten(self, buckets):
        """The pytree back from its buckets (views into them: no copy)."""
        if len(buckets) != len(self.buckets):
            raise ValueError(f"expected {len(self.buckets)} buckets, got {len(buckets)}")
        for x, (dt, size) in zip(buckets, self.buckets):
            if tuple(np.shape(x)) != (size,):
                raise ValueError(f"a bucket of {size} elements has shape {np.shape(x)}")
        leaves = []
        for a, (b, off) in zip(self.avals, self.slots):
            x = buckets[b]
            if isinstance(x, Array) and x.device == "cuda":
                from funcgrad.cuda.arrays import c_strides
                buf = x.buf
                view = buf.view(a.shape, c_strides(a.shape), buf.offset + off)
                leaves.append(Array(view, a, "cuda"))
            else:
                flat = np.asarray(x)
                leaves.append(Array(flat[off:off + a.size].reshape(a.shape), a, "cpu"))
        if self.treedef is None:
            return leaves
        return tree_unflatten(self.treedef, leaves)

    def nbytes(self) -> int:
        return sum(size * dt.itemsize for dt, size in self.buckets)

    def __repr__(self):
        sizes = ", ".join(f"{dt.name}[{size}]" for dt, size in self.buckets)
        return f"BucketPlan({len(self.avals)} leaves -> {sizes or 'no buckets'})"
