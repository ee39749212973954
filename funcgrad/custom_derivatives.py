"""JAX's jax.custom_derivatives path: custom_jvp, custom_vjp, custom_gradient, closure_convert.

Example:
    >>> import funcgrad
    >>> from funcgrad.custom_derivatives import custom_jvp
    >>> custom_jvp is funcgrad.custom_jvp
    True
"""
from funcgrad.lax.solvers import closure_convert
from funcgrad.transforms.custom import custom_gradient, custom_jvp, custom_vjp

__all__ = ["closure_convert", "custom_gradient", "custom_jvp", "custom_vjp"]
