"""No import cycles among funcgrad's modules (every import statement counts, lazy ones too)."""
import ast
import pathlib

import funcgrad

ROOT = pathlib.Path(funcgrad.__file__).parent


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict:
    """module -> set of funcgrad modules it imports (submodule imports resolved to modules)."""
    mods = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")
                    base = base[:len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
            for t in targets:
                if t in mods and t != name:
                    deps.add(t)
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
        for w in graph[v]:
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


def _is_package_parent(a: str, b: str) -> bool:
    return b.startswith(a + ".")


def test_no_import_cycles():
    graph = import_graph()
    # a package's __init__ re-exporting its submodules is not a cycle of concepts: drop the
    # edges from a package to its own submodules
    graph = {m: {d for d in deps if not _is_package_parent(m, d)} for m, deps in graph.items()}
    cycles = find_cycles(graph)
    assert not cycles, "import cycles among funcgrad modules:\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_core_imports_no_backend():
    graph = import_graph()
    for core in ("funcgrad.core", "funcgrad.prims", "funcgrad.transforms.ad", "funcgrad.transforms.batching"):
        bad = {d for d in graph[core] if d.startswith(("funcgrad.cuda", "funcgrad.backends"))}
        assert not bad, f"{core} imports a backend: {bad}"
