"""funcgrad.optim.tree: optax.tree's short names (``add``, ``vdot``, ``norm``, ...) for the
functions of :mod:`funcgrad.optim.tree_utils`.

Example:
    >>> import funcgrad.numpy as fnp
    >>> from funcgrad.optim import tree
    >>> float(tree.vdot({"a": fnp.ones(2)}, {"a": fnp.ones(2)}))
    2.0
"""
from funcgrad.optim import tree_utils as _t

add = _t.tree_add
add_scale = _t.tree_add_scale
bias_correction = _t.tree_bias_correction
cast = _t.tree_cast
clip = _t.tree_clip
div = _t.tree_div
full_like = _t.tree_full_like
get = _t.tree_get
map_params = _t.tree_map_params
max = _t.tree_max  # noqa: A001
min = _t.tree_min  # noqa: A001
mul = _t.tree_mul
norm = _t.tree_norm
ones_like = _t.tree_ones_like
random_like = _t.tree_random_like
scale = _t.tree_scale
size = _t.tree_size
split_key_like = _t.tree_split_key_like
sub = _t.tree_sub
sum = _t.tree_sum  # noqa: A001
update_infinity_moment = _t.tree_update_infinity_moment
update_moment = _t.tree_update_moment
update_moment_per_elem_norm = _t.tree_update_moment_per_elem_norm
vdot = _t.tree_vdot
where = _t.tree_where
zeros_like = _t.tree_zeros_like

__all__ = ["add", "add_scale", "bias_correction", "cast", "clip", "div", "full_like", "get",
           "map_params", "max", "min", "mul", "norm", "ones_like", "random_like", "scale",
           "size", "split_key_like", "sub", "sum", "update_infinity_moment", "update_moment",
           "update_moment_per_elem_norm", "vdot", "where", "zeros_like"]
