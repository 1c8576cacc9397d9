"""The package's layers import only downward (docs/ARCHITECTURE.md): no cycle, no import hidden inside a
function, nothing inside the package reaching up to `api` or `cli`, and no module past 600 lines."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tracelog"
MAX_LINES = 600

# Lowest first; a module may import its own layer and the layers below it.
LAYERS = [
    ("errors", "thresholds", "hardware", "hardware_lines", "locations", "clusters"),
    ("store",),
    ("parsers",),
    ("files", "fingerprint", "watch", "parse_jobs", "source_writer", "resolve", "ingest"),
    ("model",),
    ("analysis",),
    ("queries", "intake"),
    ("report", "charts"),
    ("api",),
    ("render", "cli", "__main__"),
]
LAZY_IMPORTS = {
    # The report needs Altair and vl-convert: 0.35 s and 40 MB at every start of `tracelog`, for every
    # command, if the library surface loaded them up front. Only this one is deferred, and not to dodge
    # a cycle (the report imports nothing above it).
    ("tracelog.api", "tracelog.report"),
    # The refresh brings the model, the rules and pandas: half of what `tracelog runs` cost to start.
    # `queries` loads it only to redo an owed refresh or recompute one.
    ("tracelog.queries", "tracelog.analysis.refresh"),
}
PURE = {
    "parsers": {"parsers", "errors"},  # text in, records out: no store, no model
    "model": {"model", "hardware", "errors"},  # arithmetic over the catalog: no store, no files
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))}


def top(name: str) -> str:
    """The layer key of a module: `tracelog.analysis.rules.health` -> `analysis`."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(name: str) -> int:
    key = top(name)
    for rank, keys in enumerate(LAYERS):
        if key in keys:
            return rank
    raise AssertionError(f"{name} is in no layer; add it to LAYERS and docs/ARCHITECTURE.md")


def imported(tree: ast.Module, here: str) -> list[tuple[str, int, bool]]:
    """(module imported, line, inside a function) for every import of the package."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.ImportFrom) and child.module and child.module.startswith("tracelog"):
                for alias in child.names:
                    full = f"{child.module}.{alias.name}"
                    target = full if _is_module(full) else child.module
                    found.append((target, child.lineno, in_function))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("tracelog"):
                        found.append((alias.name, child.lineno, in_function))
            visit(child, nested)

    visit(tree, False)
    return found


def _is_module(name: str) -> bool:
    path = PACKAGE.parent / name.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


ALL = modules()
EDGES = {
    name: [(target, line, inner) for target, line, inner in imported(tree, name) if target != name]
    for name, tree in ALL.items()
    if name != "tracelog"
}


def test_every_module_is_in_a_layer() -> None:
    for name in EDGES:
        layer_of(name)


@pytest.mark.parametrize("name", sorted(EDGES))
def test_imports_go_down(name: str) -> None:
    for target, line, _ in EDGES[name]:
        if target == "tracelog":
            raise AssertionError(f"{name}:{line} imports the package root; import the module it needs")
        assert layer_of(target) <= layer_of(name), f"{name}:{line} imports {target}, a layer above it"
        if top(name) in PURE:
            assert top(target) in PURE[top(name)], f"{name}:{line} imports {target}; {top(name)} stays pure"
        if top(target) in ("api", "cli"):
            assert top(name) in ("cli", "__main__"), f"{name}:{line} imports {target}"


def test_no_import_hides_inside_a_function() -> None:
    hidden = [
        f"{name}:{line} {target}"
        for name, edges in EDGES.items()
        for target, line, inner in edges
        if inner and (name, target) not in LAZY_IMPORTS
    ]
    assert not hidden, hidden


def test_starting_tracelog_loads_no_chart_library() -> None:
    """`tracelog ingest` and every other command but `report` start without Altair or vl-convert."""
    code = "import sys, tracelog.cli; print(sorted(m for m in ('altair', 'vl_convert') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_cycle() -> None:
    graph = {name: {t for t, _, _ in edges if t in EDGES} for name, edges in EDGES.items()}
    state: dict[str, int] = {}

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(nxt) :], nxt]))
            if nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = 2

    for start in graph:
        if start not in state:
            walk(start, [start])


def test_the_package_root_shadows_no_module() -> None:
    root = ALL["tracelog"]
    bound = {a.asname or a.name for n in ast.walk(root) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not {b for b in bound if _is_module(f"tracelog.{b}")}


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.name} has {lines} lines; split it along a seam it already has"
