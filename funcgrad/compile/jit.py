"""jit: trace once per input signature, optimize the expression, run it as a compiled plan."""
from __future__ import annotations

import functools
import inspect
import logging
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import core
from funcgrad.compile import switches, tree_fast
from funcgrad.compile.passes import optimize, peak_bytes
from funcgrad.config import config
from funcgrad.core import Array, ClosedExpr, Tracer, aval_of, eval_expr, trace_to_expr
from funcgrad.tree_util import keystr, tree_flatten, tree_flatten_with_path, tree_unflatten

log = logging.getLogger("funcgrad.jit")
_tls = core._state   # its `stack` is non-empty while a trace (another transformation) is on
_disabled = [0]                         # > 0 inside `with disable_jit():`
_jitted: weakref.WeakSet = weakref.WeakSet()   # every jitted function, for clear_caches()


class disable_jit:
    """Run jitted functions as plain Python inside the block (JAX's jax.disable_jit): every
    operation executes eagerly, so prints, breakpoints and Python control flow see values.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> f = funcgrad.jit(lambda x: x * 2)
        >>> with funcgrad.disable_jit():
        ...     float(f(fnp.float32(3.0)))
        6.0
    """

    def __init__(self, disable: bool = True):
        self.disable = bool(disable)

    def __enter__(self):
        _disabled[0] += self.disable
        return self

    def __exit__(self, *exc):
        _disabled[0] -= self.disable


def clear_caches():
    """Drop every jitted function's traced signatures and compiled plans (JAX's
    jax.clear_caches); the next call traces and compiles again (compiled kernels stay on
    disk)."""
    for f in list(_jitted):
        f.clear_cache()
    _SHARED.clear()


# As JAX's, the traces belong to the function: jit(f) made again (with the same static and
# donated arguments) reuses what an earlier jit(f) traced and compiled, so a global read while
# tracing keeps the value it had then. Plans depend on the engine's switches too (environment
# variables, config, module flags: compile.switches), so those key the table as well.
# fun -> {(jit's options, switches.fingerprint()): {signature: Lowered}}; entries go with fun.
_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _shared_traces(fun, options: tuple) -> dict | None:
    """The signature -> Lowered table every jit of `fun` with these options shares under the
    engine switches now (None for a callable that cannot be hashed or weakly referenced)."""
    try:
        per_fun = _SHARED.get(fun)
        if per_fun is None:
            per_fun = _SHARED[fun] = {}
    except (TypeError, ValueError):
        return None
    return per_fun.setdefault((options, switches.fingerprint()), {})


def _as_tuple(x) -> tuple:
    if x is None:
        return ()
    return (x,) if isinstance(x, (int, str)) else tuple(x)


class Lowered:
    """The optimized expression of a jitted function for one input signature."""

    def __init__(self, closed: ClosedExpr, device: str, donate: tuple):
        self.closed, self.device, self.donate = closed, device, donate
        self._exe = self._replay = self._build = None

    def build(self, outs: list):
        """The result pytree from flat results (straight-line code for common structures)."""
        return (self._build or self.builder())(outs)

    def builder(self) -> Callable:
        """build's function: flat results -> the result pytree."""
        b = self._build
        if b is None:
            tree = self.closed.out_tree
            b = self._build = tree_fast.builder(tree) or functools.partial(tree_unflatten, tree)
        return b

    expr = property(lambda self: self.closed.expr)

    def peak_bytes(self) -> int:
        """Planned peak bytes of live buffers (inputs, constants, intermediates, outputs).

        On "cuda" this is the plan's static memory plan (arguments, constants, the arena of
        intermediates and one set of results), the figure the GPU's pool then shows; elsewhere
        the liveness estimate over the expression in program order."""
        backend = core.get_backend(self.device)
        planned = backend.planned_peak(
            self.compile, [v.aval for v in self.expr.in_binders[self.expr.n_consts:]])
        return peak_bytes(self.closed.expr) if planned is None else planned

    def compile(self) -> Callable:
        if self._exe is None:
            backend = core.get_backend(self.device)
            self._exe = backend.compile(self.closed.expr, self.closed.consts, donate=self.donate)
            if self._exe is None:     # a backend without a planner: run equation by equation
                self._exe = _Interpreter(self.closed.expr, self.closed.consts, self.device)
            # a backend's short path for a call it can recognize (None: check every argument)
            self._replay = getattr(self._exe, "replay", None)
        return self._exe

    def as_text(self) -> str:
        text = str(self.closed)
        backend = core.get_backend(self.device)
        described = backend.describe(self.compile)
        if described:
            text += "\n" + described
        return text

    __str__ = as_text


class _Interpreter:
    """Runs an optimized expression on a backend without tracing machinery (eager fallback)."""

    def __init__(self, expr, consts, device):
        self.expr, self.device = expr, device
        self.consts = [core.to_array(c, device) if not isinstance(c, Array) else c
                       for c in consts]

    def __call__(self, args: list) -> list:
        return eval_expr(self.expr, args, self.consts)


class _Signature:
    __slots__ = ("_hash", "avals", "device", "paths", "statics", "tree")

    def __init__(self, tree, avals, statics, device, paths):
        self.tree, self.avals, self.statics, self.device, self.paths = (
            tree, avals, statics, device, paths)
        self._hash = hash((tree, avals, statics, device))

    def __hash__(self):
        return self._hash

    def __eq__(self, o):
        return (self.tree == o.tree and self.avals == o.avals and self.statics == o.statics
                and self.device == o.device)


def _explain(name, new: _Signature, old: Sequence[_Signature]) -> str:
    last = old[-1]
    why = []
    if new.statics != last.statics:
        now, before = dict(new.statics), dict(last.statics)
        for k in list(before) + [k for k in now if k not in before]:
            a, b = now.get(k, "<not given>"), before.get(k, "<not given>")
            if a != b:
                why.append(f"static argument {k} changed from {b!r} to {a!r}")
    if new.tree != last.tree:
        why.append(f"the pytree structure of the arguments changed from {last.tree} to {new.tree}")
    elif new.avals != last.avals:
        for p, a, b in zip(new.paths, new.avals, last.avals):
            if a != b:
                why.append(f"argument {p} changed from {b.str_short()} to {a.str_short()}")
    if new.device != last.device:
        why.append(f"the device changed from {last.device} to {new.device}")
    return (f"jit({name}) traces again ({len(old)} earlier signature(s)): "
            + ("; ".join(why) or "a new signature"))


def jit(fun: Callable | None = None, static_argnums=(), static_argnames=(),
        donate_argnums=()) -> Callable:
    """Compile `fun`: trace it once per input signature, optimize, and replay the plan.

    Without `fun` (``@jit(static_argnums=1)``), as in JAX, it returns the decorator that
    compiles the function it is given with these options.

    The signature is the arguments' pytree structure, shapes and dtypes, the values of static
    arguments, and the device. As in JAX, the traces belong to `fun`: `jit(fun)` made again
    (with the same static_argnums / static_argnames / donate_argnums, and the same engine
    switches and config) reuses them, so a global that `fun` reads keeps the value it had
    when the signature was first traced; `stats()` counts what one wrapper did. Inside another
    transformation (grad, vmap, an outer jit) the
    traced expression is inlined instead (custom rules and checkpoints kept). Passes:
    dead-code elimination, common subexpression elimination, constant folding and trivial
    algebra (x*1, x+0, no-op reshapes/broadcasts/casts). On "cuda" the plan is fused kernels
    replayed as a CUDA graph. The call runs where its arguments are: on the GPU if any is a GPU
    array, on the CPU if arrays were put there (`device_put(x, "cpu")`), and on the default
    device when all inputs are numpy arrays or Python numbers.

    Args:
        fun: a pure function of pytrees of arrays.
        static_argnums / static_argnames: arguments treated as compile-time constants (they
            must be hashable; a new value traces again).
        donate_argnums: arguments given up to the call, as in JAX: after it they are deleted
            (`x.is_deleted()`; reading one raises an error naming the call). A training loop
            that passes a step's results back in needs no donation to run without copies on
            the GPU (the plan alternates between two result sets); donation also lets the
            user's old arrays be freed early.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> f = funcgrad.jit(lambda x: fnp.tanh(x) * 2.0)
        >>> f(fnp.zeros(3)).tolist()
        [0.0, 0.0, 0.0]
        >>> f.stats()["traces"]
        1
        >>> @funcgrad.jit(static_argnums=1)
        ... def power(x, n):
        ...     return x ** n
        >>> float(power(fnp.float32(2.0), 3))
        8.0
    """
    if fun is None:   # used as a decorator factory: @jit(static_argnums=...)
        return functools.partial(jit, static_argnums=static_argnums,
                                 static_argnames=static_argnames, donate_argnums=donate_argnums)
    if not callable(fun):
        raise TypeError(f"jit expects a callable (or no function, to make a decorator), got "
                        f"{type(fun).__name__}")
    static, static_names, named = _static_positions(fun, _as_tuple(static_argnums),
                                                    _as_tuple(static_argnames))
    donate = _as_tuple(donate_argnums)
    options = (static, static_names, donate)
    cache: dict[_Signature, Lowered] = {}   # this wrapper's; misses look in _SHARED
    stats = {"traces": 0, "compiles": 0, "calls": 0}
    name = getattr(fun, "__name__", "fun")

    def _split(args, kwargs):
        for i in static:
            if i >= len(args) and i not in named:  # a named one may come by keyword
                raise TypeError(f"jit({name}): static_argnums={i} but only {len(args)} "
                                "positional arguments were given")
        st = tuple((i, args[i]) for i in static if i < len(args)) + tuple(
            (k, kwargs[k]) for k in static_names if k in kwargs)
        for k, v in st:
            try:
                hash(v)
            except TypeError:
                raise TypeError(f"jit({name}): static argument {k} must be hashable, got "
                                f"{type(v).__name__}") from None
        dyn_args = tuple(a for i, a in enumerate(args) if i not in static)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in static_names}
        return st, dyn_args, dyn_kwargs

    def _rebuild(st, dyn_args, dyn_kwargs, args, kwargs):
        it = iter(dyn_args)
        full = [args[i] if i in static else next(it) for i in range(len(args))]
        kw = dict(dyn_kwargs)
        kw.update({k: kwargs[k] for k in static_names if k in kwargs})
        return full, kw

    def _lower(sig, st, args, kwargs, leaves, tree):
        store = [None]

        def flat(*xs):
            dyn_args, dyn_kwargs = tree_unflatten(tree, list(xs))
            full, kw = _rebuild(st, dyn_args, dyn_kwargs, args, kwargs)
            out_leaves, out_tree = tree_flatten(fun(*full, **kw))
            store[0] = out_tree
            from funcgrad.transforms.ad import _as_value
            return [_as_value(o) for o in out_leaves]

        if config.explain_retraces and cache:
            log.warning(_explain(name, sig, list(cache)))
        stats["traces"] += 1
        # a backend may start work that tracing can overlap (CUDA: its compile server)
        core.get_backend(sig.device).before_trace()
        raw, raw_consts, _ = trace_to_expr(flat, list(sig.avals))
        expr, consts = optimize(raw, raw_consts)
        donated = tuple(i for i, _ in enumerate(leaves) if _leaf_arg(tree, i) in donate)
        low = Lowered(ClosedExpr(expr, consts, tree, store[0]), sig.device, donated)
        # under another transformation the traced (unoptimized) expression is replayed: the
        # passes inline custom_vjp/custom_jvp/checkpoint calls, which would drop their rules
        low.traced = (raw, raw_consts)
        return low

    def _signature(args, kwargs, flat=None):
        """flat: (leaves, tree) of (args, kwargs), already flattened (no static arguments)."""
        if flat is not None:
            st, (leaves, tree) = (), flat
        else:
            st, dyn_args, dyn_kwargs = _split(args, kwargs)
            leaves, tree = tree_flatten((dyn_args, dyn_kwargs))
        from funcgrad.transforms.ad import _as_value
        vals = [x if type(x) is Array else _as_value(x) for x in leaves]
        # a GPU argument puts the call on the GPU; arrays placed on the CPU keep it there;
        # plain numpy/Python inputs go to the default device
        devs = {v.device for v in vals if isinstance(v, Array)}
        device = next((d for d in sorted(devs) if d != "cpu"),
                      "cpu" if devs else core.default_device())
        paths = ()
        # switches that change what tracing produces (default_matmul_precision) key it too
        sig = _Signature(tree, tuple([aval_of(v) for v in vals]), st + config.trace_context(),
                         device, paths)
        return sig, st, vals, tree

    def _cached(args, kwargs, flat=None):
        """(Lowered for this signature, flat argument values, tree), tracing on a miss."""
        sig, st, vals, tree = _signature(args, kwargs, flat)
        low = cache.get(sig)
        if low is None:
            shared = _shared_traces(fun, options)
            low = None if shared is None else shared.get(sig)
            if low is None:
                if config.explain_retraces:
                    sig.paths = _paths(args, kwargs, st)
                low = _lower(sig, st, args, kwargs, vals, tree)
                if shared is not None:
                    shared[sig] = low
            cache[sig] = low
        return low, vals, tree

    def lower(*args, **kwargs) -> Lowered:
        return _cached(args, kwargs)[0]

    # the last call with only Arrays: (tree, avals, device, Lowered, trace context, leaf getter,
    # config.version then, or -1 while debug_nans is on)
    last = [None]
    # the first thing a call tries, once the last call's executable has a replay for calls it
    # recognizes: (config.version then, leaf getter, the replay, the result builder)
    front = [None]

    def _fast(args, kwargs):
        """(Lowered, flat arguments, results): the last call's Lowered when the arguments are
        Arrays with the very same avals on the same device (a training loop feeding results
        back: no signature hashing), and the results already when its executable's replay
        recognized the call (a CUDA plan's loop memo), else None."""
        hit = last[0]
        if hit is None:
            return None, tree_flatten((args, kwargs)), None
        tree0, avals, device, low, ctx, get, version = hit
        leaves = None if get is None else get((args, kwargs))
        if leaves is None:
            leaves, tree = flat = tree_flatten((args, kwargs))
            if tree != tree0 or len(leaves) != len(avals):
                return None, flat, None
        flat = leaves, tree0
        current = version == config.version   # no switch set since (debug_nans then off)
        if not current:   # compare what tracing reads
            if ctx != config.trace_context():
                return None, flat, None
            current = not config.debug_nans
            if current:
                last[0] = hit[:6] + (config.version,)
        rp = low._replay
        if rp is not None and current:
            if get is not None:
                front[0] = (config.version, get, rp, low.builder())
            outs = rp(leaves, name)
            if outs is not None:
                return low, flat, outs
        for x, a in zip(leaves, avals):
            if type(x) is not Array or x.aval is not a or x.device != device:
                return None, flat, None
        return low, flat, None

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        f = front[0]
        # a loop's steady state: the executable replays the call it predicted (a CUDA plan's
        # loop memo checks the leaves); no switch set since, no trace on
        if (f is not None and f[0] == config.version and not _disabled[0]
                and not getattr(_tls, "stack", None)):
            leaves = f[1]((args, kwargs))
            if leaves is not None:
                outs = f[2](leaves, name)
                if outs is not None:
                    stats["calls"] += 1
                    return f[3](outs)
        if _disabled[0]:
            return fun(*args, **kwargs)
        low = flat = None
        fastable = not static and not static_names and core.current_builder() is None
        if fastable:
            low, flat, outs = _fast(args, kwargs)
            vals = flat[0]
            if outs is not None:   # replayed as the executable predicted: nothing to check
                stats["calls"] += 1
                return low.build(outs)
            if low is not None and low._exe is not None and not config.debug_nans:
                # the steady state of a loop: compiled, all arguments Arrays on the device
                deleted = core.DeletedBuffer
                for v in vals:
                    if type(v.buf) is deleted:
                        v.buf.raise_error()   # a donated (deleted) array passed again
                stats["calls"] += 1
                outs = low._exe(vals)
                if low.donate:
                    _delete_donated(low, vals, name)
                return low.build(outs)
        if low is None:
            low, vals, tree = _cached(args, kwargs, flat)
            if fastable and all(type(v) is Array and v.device == low.device for v in vals):
                front[0] = None
                last[0] = (tree, tuple(v.aval for v in vals), low.device, low,
                           config.trace_context(), _leaf_getter(tree),
                           -1 if config.debug_nans else config.version)
        closed = low.closed
        if any(isinstance(v, Tracer) for v in vals) or core.current_builder() is not None:
            outs = eval_expr(low.traced[0], vals, low.traced[1])
            return tree_unflatten(closed.out_tree, outs)
        if config.debug_nans:
            from funcgrad.debug import eval_checking_nans
            outs = eval_checking_nans(closed.expr, vals, closed.consts)
            return tree_unflatten(closed.out_tree, outs)
        if low._exe is None:
            stats["compiles"] += 1
        exe = low.compile()
        stats["calls"] += 1
        dev, deleted = low.device, core.DeletedBuffer
        args_dev = []
        for v in vals:
            if type(v) is not Array or v.device != dev:
                v = core.to_array(np.asarray(v), dev)
            elif type(v.buf) is deleted:
                v.buf.raise_error()   # a donated (deleted) array passed again
            args_dev.append(v)
        outs = exe(args_dev)
        if low.donate:
            _delete_donated(low, vals, name)
        return low.build(outs)

    wrapped.lower = lower
    wrapped.stats = lambda: dict(stats, cache_size=len(cache))

    def clear_cache():
        """Drop this function's traces and plans: those of every jit(fun), as JAX's."""
        cache.clear()
        last[0] = front[0] = None
        try:
            _SHARED.pop(fun, None)
        except (TypeError, ValueError):
            pass

    wrapped.clear_cache = clear_cache
    _jitted.add(wrapped)
    wrapped._cache_size = lambda: len(cache)
    return wrapped


def _delete_donated(low, vals, name):
    """donate_argnums: the donated Arrays are deleted (reading one raises, naming the call)."""
    gone = core.DeletedBuffer((name, core.user_frame()))   # one per call, formatted if read
    for i in low.donate:
        if type(vals[i]) is Array:
            vals[i].buf = gone


def _static_positions(fun, static, static_names):
    """Like JAX: static_argnames also covers those arguments given by position, and
    static_argnums those given by keyword. Returns (static, static_names, {position: name}).

    Raises ValueError, as JAX's jit does, for static_argnums beyond the positional
    parameters (unless fun takes *args) and for static_argnames naming no parameter (unless
    fun takes **kwargs) or a positional-only one."""
    try:
        params = inspect.signature(fun).parameters.values()
    except (TypeError, ValueError):
        return static, static_names, {}
    _check_static(fun, params, static, static_names)
    pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    static = tuple(dict.fromkeys(static + tuple(pos.index(n) for n in static_names if n in pos)))
    static_names = tuple(dict.fromkeys(
        static_names + tuple(pos[i] for i in static if 0 <= i < len(pos))))
    return static, static_names, dict(enumerate(pos))


def _check_static(fun, params, static, static_names):
    """JAX's validation of static_argnums and static_argnames against fun's signature."""
    name = getattr(fun, "__name__", "fun")
    kinds = {p.name: p.kind for p in params}
    where = f"\n  at {core.user_frame_src()}"
    n_pos = sum(k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                for k in kinds.values())
    if static and inspect.Parameter.VAR_POSITIONAL not in kinds.values() and (
            -min(static) > n_pos or max(static) >= n_pos):
        raise ValueError(f"Jitted function has static_argnums={static}, but only accepts "
                         f"{n_pos} positional arguments ({name}{_params(kinds)}).{where}")
    pos_only = sorted(n for n in static_names
                      if kinds.get(n) in (inspect.Parameter.POSITIONAL_ONLY,
                                          inspect.Parameter.VAR_POSITIONAL))
    if pos_only:
        raise ValueError(f"Jitted function has invalid argnames {set(pos_only)} in "
                         f"static_argnames. These are positional-only ({name}"
                         f"{_params(kinds)}).{where}")
    if inspect.Parameter.VAR_KEYWORD in kinds.values():
        return
    unknown = sorted(n for n in static_names if n not in kinds)
    if unknown:
        raise ValueError(f"Jitted function has invalid argnames {set(unknown)} in "
                         f"static_argnames. Function does not take these args ({name}"
                         f"{_params(kinds)}).{where}")


def _params(kinds) -> str:
    """'(x, y, *args)': a signature's parameter list, for messages."""
    marks = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return "(" + ", ".join(marks.get(k, "") + n for n, k in kinds.items()) + ")"


@functools.lru_cache(maxsize=64)
def _leaf_getter(tree):
    return tree_fast.leaf_getter(tree, None)   # _fast checks the leaves itself


def _leaf_arg(tree, i):
    """Which positional argument flat leaf i came from (for donate_argnums)."""
    return _leaf_owner(tree)[i]


@functools.lru_cache(maxsize=256)
def _leaf_owner(tree):
    dyn_args, dyn_kwargs = tree_unflatten(tree, list(range(tree.num_leaves)))
    owner = {}
    for argi, a in enumerate(dyn_args):
        for leaf in tree_flatten(a)[0]:
            owner[leaf] = argi
    for leaf in tree_flatten(dyn_kwargs)[0]:
        owner[leaf] = None
    return owner


def _paths(args, kwargs, st):
    static_idx = {k for k, _ in st}
    dyn = (tuple(a for i, a in enumerate(args) if i not in static_idx),
           {k: v for k, v in kwargs.items() if k not in static_idx})
    out = []
    for path, _ in tree_flatten_with_path(dyn)[0]:
        s = keystr(path)
        out.append(s.replace("[0]", "args", 1) if s.startswith("[0]") else
                   s.replace("[1]", "kwargs", 1))
    return tuple(out)


