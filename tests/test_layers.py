"""The layers hold: every module's imports (parsed with `ast`, imports inside functions too).

- direction: codegen → ir; tuner → ir; frontend → ir; workers → codegen, tuner, ir;
  service → workers, codegen, tuner, frontend, ir, migrations (and migrations → service:
  Alembic's environment reads the models); `loomtune` (the public API) and
  benchmarks on top import anything of ours; nothing imports benchmarks or tests;
- private names: no module imports another module's `_name` (`from x import _y`,
  or `x._y` on a module of ours bound by an import);
- cycles: no import cycle between packages, at the top level (ir, tuner, …) and
  the second (tuner.search, service.cli, …);
- third-party: ir needs only the standard library, numpy and ml_dtypes; only
  service/ and migrations/ import FastAPI, SQLAlchemy, Alembic or uvicorn; only
  codegen/ and workers/ (the machine's versions) import llvmlite; only frontend/
  imports onnx; onnxruntime (a test and benchmark reference) only in service/ under
  `try: … except ImportError`. Benchmarks, on top, time those libraries directly
  and are exempt.

Each rule is one test that lists every offender with its file, line and rule.
"""

from __future__ import annotations

import ast
import itertools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "ir",
    "codegen",
    "tuner",
    "frontend",
    "workers",
    "service",
    "migrations",
    "loomtune",
    "benchmarks",
)
OURS = frozenset({*PACKAGES, "tests"})

ALLOWED = {
    "ir": {"ir"},
    "codegen": {"codegen", "ir"},
    "tuner": {"tuner", "ir"},
    "frontend": {"frontend", "ir"},
    "workers": {"workers", "codegen", "tuner", "ir"},
    "service": {"service", "workers", "codegen", "tuner", "frontend", "ir", "migrations"},
    "migrations": {"migrations", "service", "workers", "codegen", "tuner", "ir"},
    "loomtune": {
        "loomtune",
        "service",
        "migrations",
        "workers",
        "codegen",
        "tuner",
        "frontend",
        "ir",
    },
    "benchmarks": {*PACKAGES},
}
"""Which of our top-level packages each may import (no package imports tests)."""

MUTUAL = {frozenset({"service", "migrations"})}
"""Top-level pairs that may import each other: the service finds its migrations by
importing the package, and Alembic's env.py (run by Alembic, not imported by the
service) reads the service's models. The second level still has to be acyclic."""

IR_THIRD_PARTY = {"numpy", "ml_dtypes"}
SERVICE_ONLY = {"fastapi", "sqlalchemy", "alembic", "uvicorn"}
SERVICE_ONLY_IN = {"service", "migrations", "benchmarks"}
LLVMLITE_IN = {"codegen", "workers", "benchmarks"}
ONNX_IN = {"frontend", "benchmarks"}
ONNXRUNTIME_GUARDED_IN = {"service"}  # optional: only inside `try: … except ImportError`


@dataclass(frozen=True)
class Import:
    file: str  # relative to the repository
    line: int
    module: str  # the importing module
    target: str  # the imported module (resolved: `from a import b` is a.b when that is a module)
    name: str | None  # the name taken by `from x import name` (None for `import x` and modules)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _files() -> tuple[Path, ...]:
    out = []
    for package in PACKAGES:
        base = ROOT / package
        if base.is_dir():
            out += [p for p in base.rglob("*.py") if "__pycache__" not in p.parts]
        elif base.with_suffix(".py").is_file():
            out.append(base.with_suffix(".py"))
    return tuple(sorted(out))


@cache
def _modules() -> frozenset[str]:
    return frozenset(_module_name(p) for p in _files())


def _is_package(module: str) -> bool:
    return (ROOT / module.replace(".", "/") / "__init__.py").is_file()


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, name] if name else base)


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


@cache
def _imports() -> tuple[Import, ...]:
    out: list[Import] = []
    modules = _modules()
    for path in _files():
        module = _module_name(path)
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Import):
                out += [Import(rel, node.lineno, module, a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    source = _resolve_relative(
                        module, path.name == "__init__.py", node.level, node.module
                    )
                for a in node.names:
                    sub = f"{source}.{a.name}"
                    if sub in modules:
                        out.append(Import(rel, node.lineno, module, sub, None))
                    else:
                        out.append(Import(rel, node.lineno, module, source, a.name))
    return tuple(out)


def _top(module: str) -> str:
    return module.split(".")[0]


def _is_ours(module: str) -> bool:
    return _top(module) in OURS


# -- (a) direction -------------------------------------------------------------------------


def _direction() -> Iterator[str]:
    for imp in _imports():
        if not _is_ours(imp.target):
            continue
        layer, target = _top(imp.module), _top(imp.target)
        if target not in ALLOWED[layer]:
            allowed = ", ".join(sorted(ALLOWED[layer]))
            yield (
                f"{imp.where}: {imp.module} imports {imp.target} "
                f"(direction: {layer} may import only {allowed})"
            )


# -- (b) private names ----------------------------------------------------------------------


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_bindings(tree: ast.Module) -> dict[str, str]:
    """Names an import binds to one of our modules (`import a.b` binds a; `import a.b as x`
    binds x to a.b; `from a import b` binds b when a.b is a module)."""
    modules = _modules()
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if not _is_ours(a.name):
                    continue
                if a.asname:
                    bound[a.asname] = a.name
                else:
                    bound[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if f"{node.module}.{a.name}" in modules:
                    bound[a.asname or a.name] = f"{node.module}.{a.name}"
    return bound


def _attribute_reaches(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, module, private name) for each `module._name` on a module of ours."""
    tree = _parse(path)
    bound = _module_bindings(tree)
    if not bound:
        return
    modules = _modules()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        chain: list[str] = []
        value: ast.expr = node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in bound:
            continue
        module = ".".join([bound[value.id], *reversed(chain)])
        if module in modules:
            yield node.lineno, module, node.attr


def _private_names() -> Iterator[str]:
    for imp in _imports():
        private = imp.name is not None and _private(imp.name)
        if private and _is_ours(imp.target) and imp.target != imp.module:
            yield (
                f"{imp.where}: {imp.module} imports {imp.target}.{imp.name} "
                "(private name of another module)"
            )
    for path in _files():
        module = _module_name(path)
        rel = path.relative_to(ROOT).as_posix()
        for line, target, name in _attribute_reaches(path):
            if target != module:
                yield (
                    f"{rel}:{line}: {module} uses {target}.{name} (private name of another module)"
                )


# -- (c) cycles between packages ---------------------------------------------------------


def _node(module: str, level: int) -> str:
    return ".".join(module.split(".")[:level])


def _edges(level: int) -> dict[tuple[str, str], Import]:
    """One example import for each edge between distinct packages at `level`."""
    edges: dict[tuple[str, str], Import] = {}
    for imp in _imports():
        if not _is_ours(imp.target) or _top(imp.target) == "tests":
            continue
        a, b = _node(imp.module, level), _node(imp.target, level)
        if level > 1 and _top(a) != _top(b):
            continue  # between top-level packages: the first level's concern
        if level == 1 and frozenset({a, b}) in MUTUAL:
            continue
        if a != b:
            edges.setdefault((a, b), imp)
    return edges


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one node, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _a_cycle(graph: dict[str, set[str]], nodes: list[str]) -> list[str]:
    """One cycle through the first of `nodes` inside the component (breadth first)."""
    inside = set(nodes)
    start = nodes[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & inside):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError(f"no cycle through {start}")


def _cycles(level: int) -> Iterator[str]:
    edges = _edges(level)
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    for component in _strongly_connected(graph):
        cycle = _a_cycle(graph, component)
        steps = "; ".join(f"{a} -> {b} ({edges[a, b].where})" for a, b in itertools.pairwise(cycle))
        yield (
            f"{edges[cycle[0], cycle[1]].where}: import cycle between packages "
            f"{' -> '.join(cycle)} (component: {', '.join(component)}): {steps}"
        )


def _package_cycles() -> Iterator[str]:
    yield from _cycles(1)
    yield from _cycles(2)


# -- (d) third-party libraries -------------------------------------------------------------


def _third_party() -> Iterator[str]:
    stdlib = sys.stdlib_module_names
    for imp in _imports():
        top, layer = _top(imp.target), _top(imp.module)
        if _is_ours(imp.target) or top in stdlib or top == "__future__":
            continue
        if layer == "ir" and top not in IR_THIRD_PARTY:
            yield (
                f"{imp.where}: {imp.module} imports {top} "
                f"(third-party: ir needs only the standard library, {', '.join(sorted(IR_THIRD_PARTY))})"
            )
        if top in SERVICE_ONLY and layer not in SERVICE_ONLY_IN:
            yield (
                f"{imp.where}: {imp.module} imports {top} "
                "(third-party: only service/ and migrations/ import it)"
            )
        if top == "llvmlite" and layer not in LLVMLITE_IN:
            yield (
                f"{imp.where}: {imp.module} imports llvmlite "
                "(third-party: only codegen/ and workers/ import it)"
            )
        if top == "onnx" and layer not in ONNX_IN:
            yield f"{imp.where}: {imp.module} imports onnx (third-party: only frontend/ imports it)"
        guarded = layer in ONNXRUNTIME_GUARDED_IN and imp.line in _guarded_lines(imp.file)
        if top == "onnxruntime" and layer != "benchmarks" and not guarded:
            yield (
                f"{imp.where}: {imp.module} imports onnxruntime (third-party: only tests/, "
                "benchmarks/ and service/ inside `try: … except ImportError`)"
            )


@cache
def _guarded_lines(file: str) -> frozenset[int]:
    """Lines of imports inside a `try` body whose handlers catch ImportError."""
    lines: set[int] = set()
    for node in ast.walk(_parse(ROOT / file)):
        if not isinstance(node, ast.Try):
            continue
        caught = {
            n.id
            for h in node.handlers
            for n in ast.walk(h.type)
            if h.type is not None and isinstance(n, ast.Name)
        }
        if caught & {"ImportError", "ModuleNotFoundError", "Exception"}:
            for stmt in node.body:
                lines.update(
                    n.lineno for n in ast.walk(stmt) if isinstance(n, ast.Import | ast.ImportFrom)
                )
    return frozenset(lines)


RULES = {
    "direction": _direction,
    "private-names": _private_names,
    "package-cycles": _package_cycles,
    "third-party": _third_party,
}


def test_the_scan_sees_the_tree() -> None:
    """The scan finds the packages and imports inside functions (a guard against a
    silently empty scan that would pass every rule)."""
    modules = _modules()
    assert {"ir", "codegen", "tuner", "frontend", "workers", "service", "loomtune"} <= modules
    assert any(
        imp.module == "tuner.search.strategy" and imp.target == "tuner.search.evolutionary"
        for imp in _imports()
    )


@pytest.mark.parametrize("rule", sorted(RULES))
def test_layers(rule: str) -> None:
    offenders = sorted(set(RULES[rule]()))
    assert not offenders, f"{len(offenders)} import(s) break the rule {rule!r}:\n" + "\n".join(
        offenders
    )
