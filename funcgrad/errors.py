"""JAX's error classes (jax.errors) under their names, for ``except`` clauses ported from JAX.

Each is the class funcgrad raises in that case: catching ``errors.TracerBoolConversionError``
catches an ``if`` on a traced value inside jit, as in JAX. They all derive from
``funcgrad.FuncgradError`` too; the concretization errors also from ``TypeError`` (and
``ConcretizationTypeError``, which in JAX the integer and array ones do not), the boolean-index
one from ``IndexError``.

Example:
    >>> import funcgrad, funcgrad.numpy as fnp
    >>> from funcgrad import errors
    >>> @funcgrad.jit
    ... def relu(x):
    ...     return x if x > 0 else 0.0
    >>> try:
    ...     relu(fnp.float32(2.0))
    ... except errors.TracerBoolConversionError:
    ...     print("an if on a traced value")
    an if on a traced value
"""
from funcgrad.core import ConcretizationError as ConcretizationTypeError
from funcgrad.core import (
    NonConcreteBooleanIndexError,
    TracerArrayConversionError,
    TracerBoolConversionError,
    TracerIntegerConversionError,
    UnexpectedTracerError,
)

__all__ = [
    "ConcretizationTypeError",
    "NonConcreteBooleanIndexError",
    "TracerArrayConversionError",
    "TracerBoolConversionError",
    "TracerIntegerConversionError",
    "UnexpectedTracerError",
]
