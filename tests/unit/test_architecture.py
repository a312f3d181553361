"""The house drawn from its imports: files are rooms, module-level imports are arrows.

- The domain (strix_pipeline/) never imports the orchestrator (arrows point inward).
- The ground floor imports nothing of the project: the config schema and the records every room
  reads, the helpers beside them (paths, signals, units), provision/ (which imports only its own
  modules and those helpers) and stats/, the pure statistics below the runner and the analysis.
- No project import hides inside a function (the usual way to dodge a cycle), and the arrows make
  no circle: every room sits on a floor above the rooms it imports.
- Nor do the packages: a package (the first name under strix_pipeline/, a top-level module being its
  own) imports no package that imports it back, through any number of others.
- Each class name is defined once: one name, one meaning.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import REPO

DOMAIN = REPO / "strix_pipeline"
LAYERS = ("strix_pipeline", "assets", "schedules", "strix_dagster")
OUTER = ("dagster", "dagster_webserver", "dagster_graphql", "assets", "schedules", "strix_dagster")
# module -> the project modules it may import (prefixes); empty: nothing of the project
GROUND = {
    "strix_pipeline.config": ("strix_pipeline.config",),
    "strix_pipeline.records": ("strix_pipeline.records",),
    "strix_pipeline.paths": (),
    "strix_pipeline.signals": (),
    "strix_pipeline.units": (),
    "strix_pipeline.provision": ("strix_pipeline.provision", "strix_pipeline.paths", "strix_pipeline.units"),
    "strix_pipeline.stats": ("strix_pipeline.stats",),
}


def _modules() -> dict[str, Path]:
    out = {}
    for root in LAYERS:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an imported name lives in (the longest module prefix), else None."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in MODULES:
            return ".".join(parts)
        parts.pop()
    return None


def _imports(module: str, tree: ast.AST) -> list[tuple[ast.stmt, str]]:
    """(statement, imported project module) for every import in ``tree``; ``from pkg import sub``
    points at the submodule, as Python loads it."""
    out = []
    is_pkg = MODULES[module].name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_pkg else module.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, *([node.module] if node.module else [])])
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        out += [(node, t) for n in names if (t := _resolve(n)) is not None and t != module]
    return out


def _module_level(tree: ast.Module) -> list[ast.stmt]:
    """Statements outside any function (a class body and `if TYPE_CHECKING:` included)."""
    out, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        out.append(node)
        todo += [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)]
    return out


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    edges: dict[str, set[str]] = {}
    hidden = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        top = set(map(id, _module_level(tree)))
        edges[module] = set()
        for node, target in _imports(module, tree):
            if id(node) in top:
                edges[module].add(target)
            else:
                hidden.append(f"{path.relative_to(REPO)}:{node.lineno} imports {target} inside a function")
    return edges, sorted(set(hidden))


def test_no_file_of_the_domain_imports_dagster_or_the_dagster_layer() -> None:
    offenders = []
    files = sorted(DOMAIN.rglob("*.py"))
    assert len(files) > 50  # the walk found the package
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [
                f"{path.relative_to(DOMAIN.parent)}: {n}" for n in names if n.split(".")[0] in OUTER
            ]
    assert offenders == []


def test_the_ground_floor_imports_nothing_of_the_project() -> None:
    edges, _ = _graph()
    found = [m for m in MODULES if any(m == g or m.startswith(g + ".") for g in GROUND)]
    assert {
        "strix_pipeline.config",
        "strix_pipeline.records",
        "strix_pipeline.provision.vllm_env",
        "strix_pipeline.stats.paired",
    } <= set(found)
    offenders = []
    for module in found:
        floor = next(
            g for g in sorted(GROUND, key=len, reverse=True) if module == g or module.startswith(g + ".")
        )
        allowed = GROUND[floor]
        offenders += [
            f"{module} imports {t}"
            for t in sorted(edges[module])
            if not any(t == a or t.startswith(a + ".") for a in allowed)
        ]
    assert offenders == []


def test_no_project_import_hides_inside_a_function() -> None:
    _, hidden = _graph()
    assert hidden == []


def test_the_imports_make_no_circle() -> None:
    edges, _ = _graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert circles == []


def _package(module: str) -> str:
    """``strix_pipeline.analysis.bisect.steps`` -> ``analysis``; a top-level module is its own package."""
    return module.split(".")[1]


def _package_edges(edges: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(package, package it imports) -> the module imports that make that arrow, for the domain."""
    out: dict[tuple[str, str], list[str]] = {}
    for module, targets in edges.items():
        if not module.startswith("strix_pipeline."):
            continue
        for t in sorted(targets):
            if t.startswith("strix_pipeline.") and _package(t) != _package(module):
                out.setdefault((_package(module), _package(t)), []).append(f"{module} -> {t}")
    return out


def _package_cycles(arrows: dict[tuple[str, str], list[str]]) -> list[str]:
    """Every group of packages that reach each other (a strongly connected component of more than one),
    as the arrows inside it, each with one module import that makes it."""
    succ: dict[str, list[str]] = {}
    for a, b in sorted(arrows):
        succ.setdefault(a, []).append(b)
        succ.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            groups.append(sorted([v, *group]))

    for v in sorted(succ):
        if v not in index:
            visit(v)
    out = []
    for group in sorted(g for g in groups if len(g) > 1):
        inside = [
            f"  {a} -> {b} ({arrows[a, b][0]}"
            + (f", +{len(arrows[a, b]) - 1} more" if len(arrows[a, b]) > 1 else "")
            + ")"
            for a, b in sorted(arrows)
            if a in group and b in group
        ]
        out.append(f"packages {', '.join(group)} import each other:\n" + "\n".join(inside))
    return out


def test_the_packages_make_no_circle() -> None:
    edges, _ = _graph()
    arrows = _package_edges(edges)
    assert ("analysis", "warehouse") in arrows  # the walk found the packages' arrows
    cycles = _package_cycles(arrows)
    assert not cycles, "\n".join(cycles)


def test_a_package_circle_is_found_and_named() -> None:
    """The package walk itself can fail: a circle through three packages is reported with its arrows,
    and a tail into it is not."""
    edges = {
        "strix_pipeline.a.x": {"strix_pipeline.b"},
        "strix_pipeline.b": {"strix_pipeline.c.y"},
        "strix_pipeline.c.y": {"strix_pipeline.a.z", "strix_pipeline.c.w"},
        "strix_pipeline.d": {"strix_pipeline.a.x"},
    }
    (cycle,) = _package_cycles(_package_edges(edges))
    assert cycle.splitlines() == [
        "packages a, b, c import each other:",
        "  a -> b (strix_pipeline.a.x -> strix_pipeline.b)",
        "  b -> c (strix_pipeline.b -> strix_pipeline.c.y)",
        "  c -> a (strix_pipeline.c.y -> strix_pipeline.a.z)",
    ]


def test_the_walk_finds_a_hidden_import() -> None:
    """The walk itself can fail: an import inside a function is told apart from one at the top."""
    tree = ast.parse("import os\n\ndef f():\n    from strix_pipeline.engines import build_spec\n")
    hidden = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and id(n) not in set(map(id, _module_level(tree)))
    ]
    assert len(hidden) == 1
    assert _resolve("strix_pipeline.engines.build_spec") == "strix_pipeline.engines"


def test_every_class_name_is_defined_once() -> None:
    """One meaning per word: two classes of one name in two rooms read as one thing and are not."""
    where: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(module)
    twice = {name: modules for name, modules in where.items() if len(modules) > 1}
    assert not twice, twice
