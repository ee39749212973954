"""funcgrad's import graph: no cycles, and no module imports a layer above its own.

Every import statement counts, lazy ones inside functions too, and so do the edges Python adds
by itself: importing `a.b.c` first runs the packages `a` and `a.b`, and a package's `__init__`
that imports its submodules depends on them. Only a module's own enclosing packages, which are
already running when it is imported, are not edges unless the module names one of them as the
source of a value (`from funcgrad import grad` inside funcgrad runs back up to the package).
"""
import ast
import pathlib

import funcgrad

ROOT = pathlib.Path(funcgrad.__file__).parent

# the house, bottom to top: a module may import its own layer and the layers below it
LAYERS = [
    ("funcgrad.config", "funcgrad.tree_util", "funcgrad.tree_util_nodes", "funcgrad.core"),
    ("funcgrad.prims",),
    ("funcgrad.transforms", "funcgrad.debug", "funcgrad.ad_checkpoint"),
    ("funcgrad.compile",),
    ("funcgrad.backends", "funcgrad.cuda"),
]
# imports that still run up a layer, each with its reason; the list only shrinks
KNOWN_UPWARD = {
    # the attention primitives' numpy impls (their executable specs) are written as
    # compositions of funcgrad.numpy ops; they run eagerly or are traced, never imported by jnp
    ("funcgrad.prims.attention", "funcgrad.numpy"),
    ("funcgrad.prims.attention_bwd", "funcgrad.numpy"),
    ("funcgrad.prims.attention_lse", "funcgrad.numpy"),
    # lax.reduce_window recognises the user's jnp.add / jnp.maximum computation
    ("funcgrad.prims.windows", "funcgrad.numpy"),
    # rules that differentiate or batch a composed reference (the fused rows' backward, the
    # attention reference, pure_callback's batching) call ad/vmap when the rule runs
    ("funcgrad.prims.attention", "funcgrad.transforms"),
    ("funcgrad.prims.attention", "funcgrad.transforms.ad"),
    ("funcgrad.prims.callback", "funcgrad.transforms"),
    ("funcgrad.prims.callback", "funcgrad.transforms.ad"),
    ("funcgrad.prims.callback", "funcgrad.transforms.batching"),
    ("funcgrad.prims.rows_bwd", "funcgrad.transforms"),
    ("funcgrad.prims.rows_bwd", "funcgrad.transforms.ad"),
    ("funcgrad.prims.rows_bwd", "funcgrad.transforms.batching"),
    # a loop primitive's body is optimized (compile.passes.optimize) when the loop is built
    ("funcgrad.prims.loops", "funcgrad.compile"),
    ("funcgrad.prims.loops", "funcgrad.compile.passes"),
}


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict:
    """module -> set of funcgrad modules its import runs (every edge, see the docstring)."""
    mods = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()

        def add(target, explicit):
            segs = target.split(".")
            for k in range(1, len(segs) + 1):
                pre = ".".join(segs[:k])
                if pre not in mods or pre == name:
                    continue
                own_parent = name.startswith(pre + ".")
                if not own_parent or (explicit and k == len(segs)):
                    deps.add(pre)

        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for a in node.names:
                    add(a.name, True)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")
                    base = base[:len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                for a in node.names:
                    sub = f"{mod}.{a.name}"
                    if sub in mods:
                        add(sub, True)
                    else:
                        add(mod, True)
        graph[name] = deps
    return graph


def find_cycles(graph: dict) -> list:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layer_of(module: str) -> int:
    """The layer index of a module (len(LAYERS) for the libraries above the house)."""
    for i, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    return len(LAYERS)


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles among funcgrad modules:\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_no_import_runs_up_a_layer():
    bad = sorted((m, d) for m, deps in import_graph().items() for d in deps
                 if layer_of(d) > layer_of(m) and (m, d) not in KNOWN_UPWARD)
    assert not bad, "imports that run up a layer:\n" + "\n".join(f"{m} -> {d}" for m, d in bad)


def test_known_upward_imports_still_exist():
    graph = import_graph()
    stale = sorted(e for e in KNOWN_UPWARD if e[1] not in graph.get(e[0], ()))
    assert not stale, f"remove from KNOWN_UPWARD (fixed): {stale}"


def test_graph_sees_every_kind_of_edge():
    graph = import_graph()
    assert "funcgrad.numpy._ufuncs" in graph["funcgrad.numpy"]         # package -> submodule
    assert "funcgrad.prims" in graph["funcgrad.transforms.ad"]         # from funcgrad import prims
    assert "funcgrad.compile" in graph["funcgrad.cuda.fusion"]         # implied parent package


def test_core_imports_no_backend():
    graph = import_graph()
    for core in ("funcgrad.core", "funcgrad.prims", "funcgrad.transforms.ad",
                 "funcgrad.transforms.batching"):
        bad = {d for d in graph[core] if d.startswith(("funcgrad.cuda", "funcgrad.backends"))}
        assert not bad, f"{core} imports a backend: {bad}"
