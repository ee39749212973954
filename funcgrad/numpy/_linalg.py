"""Products of funcgrad.numpy: matmul, dot, outer, tensordot and einsum via dot_general."""
from __future__ import annotations

import operator
import string

import numpy as np

from funcgrad import prims as P
from funcgrad.core import type_error
from funcgrad.core.dtypes import dtype_kind
from funcgrad.numpy._base import asarray, broadcast_shapes, broadcast_to, reshape, result_type
from funcgrad.numpy._shape import transpose
from funcgrad.numpy._ufuncs import sum
from funcgrad.prims import complex as PC


def _promote2(op, a, b):
    dt = result_type(a, b)
    return asarray(a, dt), asarray(b, dt)


def widen_operands(lhs, rhs, preferred_element_type):
    """(lhs, rhs) converted to `preferred_element_type` when it is a wider dtype of the same
    kind than theirs (bfloat16 -> float32, int8 -> int32: a product accumulating in it, as
    XLA's preferred_element_type), else unchanged."""
    if preferred_element_type is None:
        return lhs, rhs
    pref = np.dtype(preferred_element_type)
    out = []
    for x in (lhs, rhs):
        dt = asarray(x).dtype
        k, kp = dtype_kind(dt), dtype_kind(pref)
        same = k == kp or (k in "iu" and kp in "iu")
        out.append(asarray(x, pref) if same and pref.itemsize > dt.itemsize else x)
    return out[0], out[1]


def matmul(a, b, *, precision=None):
    """numpy.matmul / `@`: batched over leading axes with broadcasting; 1-D operands are
    promoted to matrices and the added axis removed.

    `precision` (JAX's: None, "default", "high", "highest", "bfloat16", "tensorfloat32",
    "float32", lax.Precision members) picks float32 products' speed/accuracy on CUDA (None
    follows funcgrad.config's "default_matmul_precision": full float32 unless changed); the CPU
    ignores it (numpy computes in the operand dtype). The same holds for dot, inner, vdot,
    tensordot and einsum.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> (fnp.ones((2, 3)) @ fnp.ones(3)).tolist()
        [3.0, 3.0]
    """
    a, b = _promote2("matmul", a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise type_error("matmul", "operands must not be scalars", (a.aval, b.aval))
    a1, b1 = a.ndim == 1, b.ndim == 1
    if a1:
        a = reshape(a, (1, a.shape[0]))
    if b1:
        b = reshape(b, (b.shape[0], 1))
    if a.shape[-1] != b.shape[-2]:
        raise type_error("matmul", f"contracting dimensions differ: {a.shape[-1]} (last axis "
                         f"of the first operand) != {b.shape[-2]} (second-to-last axis of the "
                         "second)", (a.aval, b.aval))
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], op="matmul")
    nb = len(batch)
    if nb and b.ndim == 2:
        # a matrix on the right: a's batch axes are free axes, nothing is broadcast (so the
        # gradient of b is one contraction, not a batch of them summed afterwards)
        out = P.dot_general(a, b, (((a.ndim - 1,), (0,)), ((), ())), precision)
    elif nb and a.ndim == 2:
        out = P.dot_general(a, b, (((1,), (b.ndim - 2,)), ((), ())), precision)  # (M,*b,N)
        out = P.transpose(out, list(range(1, nb + 1)) + [0, nb + 1])
    else:
        if nb:
            a = broadcast_to(a, batch + tuple(a.shape[-2:]))
            b = broadcast_to(b, batch + tuple(b.shape[-2:]))
        bd = tuple(range(nb))
        out = P.dot_general(a, b, (((nb + 1,), (nb,)), (bd, bd)), precision)
    if a1 and b1:
        return reshape(out, batch)
    if a1:
        return reshape(out, batch + (out.shape[-1],))
    if b1:
        return reshape(out, batch + (out.shape[-2],))
    return out


def dot(a, b, *, precision=None):
    """numpy.dot: inner product of vectors, matrix product, or sum over the last axis of a and
    the second-to-last of b."""
    a, b = _promote2("dot", a, b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    cb = 0 if b.ndim == 1 else b.ndim - 2
    if a.shape[-1] != b.shape[cb]:
        raise type_error("dot", f"shapes {tuple(a.shape)} and {tuple(b.shape)} not aligned",
                         (a.aval, b.aval))
    return P.dot_general(a, b, (((a.ndim - 1,), (cb,)), ((), ())), precision)


def vdot(a, b, *, precision=None):
    """Dot product of the flattened arrays, conjugating a first (numpy.vdot)."""
    a = asarray(a)
    if dtype_kind(a.dtype) == "c":
        a = PC.conj(a)
    return dot(reshape(a, (-1,)), reshape(b, (-1,)), precision=precision)


def inner(a, b, *, precision=None):
    a, b = _promote2("inner", a, b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return P.dot_general(a, b, (((a.ndim - 1,), (b.ndim - 1,)), ((), ())), precision)


def outer(a, b):
    """numpy.outer of the flattened operands."""
    a, b = _promote2("outer", reshape(asarray(a), (-1,)), reshape(asarray(b), (-1,)))
    return reshape(a, (-1, 1)) * reshape(b, (1, -1))  # (m, 1) * (1, n) broadcasts to (m, n)


def tensordot(a, b, axes=2, *, precision=None):
    """numpy.tensordot with an int or a pair of axis sequences."""
    a, b = _promote2("tensordot", a, b)
    if isinstance(axes, int):
        ca, cb = tuple(range(a.ndim - axes, a.ndim)), tuple(range(axes))
    else:
        ca, cb = axes
        ca = (ca,) if isinstance(ca, int) else tuple(ca)
        cb = (cb,) if isinstance(cb, int) else tuple(cb)
        ca = tuple(x % a.ndim for x in ca)
        cb = tuple(x % b.ndim for x in cb)
    return P.dot_general(a, b, ((ca, cb), ((), ())), precision)


# ---------------------------------------------------------------------------------------------
# einsum
# ---------------------------------------------------------------------------------------------

def _parse(subscripts, operands):
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        ins, out = subscripts.split("->")
    else:
        ins, out = subscripts, None
    ins = ins.split(",")
    if len(ins) != len(operands):
        raise ValueError(f"einsum: {len(ins)} operand subscripts for {len(operands)} operands")
    spare = iter(sorted(set(string.ascii_uppercase) - set(subscripts)))
    max_ell = max([op.ndim - len(s.replace("...", "")) for s, op in zip(ins, operands)
                   if "..." in s] or [0])
    ell = "".join(next(spare) for _ in range(max_ell))
    terms = []
    for s, op in zip(ins, operands):
        if "..." in s:
            k = op.ndim - len(s.replace("...", ""))
            s = s.replace("...", ell[len(ell) - k:] if k else "")
        if len(s) != op.ndim:
            raise ValueError(f"einsum: subscripts {s!r} do not match an operand of rank "
                             f"{op.ndim}")
        terms.append(s)
    if out is None:
        counts = {}
        for s in terms:
            for c in s:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
    return terms, out


def _sum_unused(x, s, keep):
    """Sum out labels of x that no other term or the output needs."""
    axes = tuple(i for i, c in enumerate(s) if c not in keep)
    if not axes:
        return x, s
    return sum(x, axes), "".join(c for c in s if c in keep)


def _contract(x, sx, y, sy, keep, precision=None):
    x, sx = _sum_unused(x, sx, set(sy) | keep)
    y, sy = _sum_unused(y, sy, set(sx) | keep)
    common = [c for c in sx if c in sy]
    batch = [c for c in common if c in keep]
    contract = [c for c in common if c not in keep]
    dn = ((tuple(sx.index(c) for c in contract), tuple(sy.index(c) for c in contract)),
          (tuple(sx.index(c) for c in batch), tuple(sy.index(c) for c in batch)))
    out = P.dot_general(x, y, dn, precision)
    s_out = "".join(batch) + "".join(c for c in sx if c not in common) + "".join(
        c for c in sy if c not in common)
    return out, s_out


_SUBLIST_LABELS = string.ascii_lowercase + string.ascii_uppercase


def _from_sublists(args):
    """numpy's sublist form (op0, [0, 1], op1, [1, 2], [0, 2]) as (subscripts, operands)."""
    out = args[-1] if len(args) % 2 else None
    args = args[:-1] if len(args) % 2 else args
    operands, lists = list(args[0::2]), list(args[1::2])

    def term(labels):
        text = ""
        for lab in labels:
            if lab is Ellipsis:
                text += "..."
                continue
            try:
                text += _SUBLIST_LABELS[operator.index(lab)]
            except (TypeError, IndexError):
                raise ValueError(f"einsum: a sublist label must be an int in [0, 52) or "
                                 f"Ellipsis, got {lab!r}") from None
        return text

    subscripts = ",".join(term(t) for t in lists)
    return (subscripts if out is None else subscripts + "->" + term(out)), operands


def _diagonals(o, s):
    """An operand whose term repeats a label ('ii', 'iji'), reduced to its diagonal along the
    repeated axes (numpy's rule), and the term without the repeats."""
    from funcgrad.numpy._index_tricks import diagonal
    while len(set(s)) != len(s):
        c = next(ch for ch in s if s.count(ch) > 1)
        p = s.index(c)
        q = s.index(c, p + 1)
        if o.shape[p] != o.shape[q]:
            raise ValueError(f"einsum: label {c!r} repeated in one operand names axes of "
                             f"sizes {o.shape[p]} and {o.shape[q]} (operand shape {o.shape})")
        o = diagonal(o, 0, p, q)   # the diagonal becomes the last axis
        s = s[:p] + s[p + 1:q] + s[q + 1:] + c
    return o, s


def einsum(subscripts, *operands, optimize=None, precision=None):
    """numpy.einsum: any number of operands, contracted pairwise left to right with
    dot_general; '...' broadcasts; a label repeated within one operand takes its diagonal
    (``"ii"`` is the trace); numpy's sublist form ``einsum(a, [0, 1], b, [1, 2])`` works too.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.einsum("ij,jk->ik", fnp.ones((2, 3)), fnp.ones((3, 4))).shape
        (2, 4)
        >>> float(fnp.einsum("ii", fnp.eye(3)))
        3.0
        >>> fnp.einsum(fnp.ones((2, 3)), [0, 1], fnp.ones(3), [1]).tolist()
        [3.0, 3.0]
    """
    if not isinstance(subscripts, str):
        subscripts, operands = _from_sublists((subscripts, *operands))
    dt = result_type(*operands)
    ops = [asarray(o, dt) for o in operands]
    terms, out = _parse(subscripts, ops)
    if len(set(out)) != len(out):
        raise ValueError(f"einsum: output subscripts {out!r} repeat a label")
    for k, s in enumerate(terms):
        if len(set(s)) != len(s):
            ops[k], terms[k] = _diagonals(ops[k], s)
    sizes = {}
    for s, o in zip(terms, ops):
        for c, n in zip(s, o.shape):
            if sizes.get(c, 1) != 1 and n != 1 and sizes[c] != n:
                raise type_error("einsum", f"label {c!r} has sizes {sizes[c]} and {n}",
                                 [x.aval for x in ops])
            sizes[c] = n if n != 1 or c not in sizes else sizes[c]  # 1 broadcasts (also to 0)
    ops = [broadcast_to(o, [sizes[c] for c in s]) for s, o in zip(terms, ops)]
    x, sx = ops[0], terms[0]
    for k in range(1, len(ops)):
        keep = set(out).union(*[set(t) for t in terms[k + 1:]])
        x, sx = _contract(x, sx, ops[k], terms[k], keep, precision)
    x, sx = _sum_unused(x, sx, set(out))
    if set(out) - set(sx):
        raise ValueError(f"einsum: output label(s) {sorted(set(out) - set(sx))} not in inputs")
    return transpose(x, [sx.index(c) for c in out]) if sx != out else x
