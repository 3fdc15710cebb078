"""geodiag and gti import each other's modules without a cycle, counting every import:
module level, inside functions (lazy) and under ``TYPE_CHECKING``. A cycle is how the
reading wing once tangled (``adapter`` <-> ``checkpoints``): each module should need only
those below it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("geodiag", "gti")


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the two packages."""
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``name`` imports anywhere in its file.
    ``from pkg import x`` is an edge to ``pkg.x`` when that is a module, else to ``pkg``."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for a in node.names:
                target = f"{source}.{a.name}"
                if target in modules:
                    out.add(target)
                elif source in modules:
                    out.add(source)
    out.discard(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_geodiag_or_gti():
    modules = _modules()
    assert "geodiag.io.checkpoint" in modules and "gti.cli" in modules  # scanned the tree
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    assert "geodiag.io.formats.peft_adapter" in graph["geodiag.io.checkpoint"]  # edges are found
    assert _cycles(graph) == []


# geodiag's floors, bottom to top (docs/architecture.md): a module imports only its own
# floor and those below it. The front doors (cli, api, precommit, callback, the package
# itself) sit on top.
LAYERS = (
    (
        "geodiag.version",
        "geodiag.errors",
        "geodiag.escape",
        "geodiag.atomic",
        "geodiag.jsonio",
        "geodiag.settings",
        "geodiag.progress",
    ),
    ("geodiag.io.sources",),
    ("geodiag.io.formats",),
    ("geodiag.io.vocabulary",),
    ("geodiag.io",),
    ("geodiag.metrics",),
    ("geodiag.analysis",),
    ("geodiag.gate",),
    ("geodiag.outputs",),
    ("geodiag", "geodiag.cli", "geodiag.api", "geodiag.precommit", "geodiag.callback"),
)


def _floor(module: str) -> int:
    """The index in LAYERS of the longest prefix that names ``module``'s floor."""
    best, floor = -1, None
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, floor = len(name), i
    assert floor is not None, f"{module} sits on no floor of LAYERS"
    return floor


def _upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs of geodiag where the imported module sits higher."""
    return sorted(
        (a, b)
        for a, targets in graph.items()
        if a.split(".")[0] == "geodiag"
        for b in targets
        if b.split(".")[0] == "geodiag" and _floor(b) > _floor(a)
    )


def test_the_floor_check_finds_an_upward_import():
    graph = {
        "geodiag.io.formats.store": {"geodiag.gate.checks", "geodiag.errors"},
        "geodiag.gate.checks": set(),
    }
    assert _upward(graph) == [("geodiag.io.formats.store", "geodiag.gate.checks")]


def test_geodiag_never_imports_gti_nor_a_floor_above():
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    into_gti = sorted(
        (a, b)
        for a, bs in graph.items()
        if a.startswith("geodiag")
        for b in bs
        if b.startswith("gti")
    )
    assert into_gti == []
    assert _upward(graph) == []


def io_order() -> tuple[list[str], set[str]]:
    """(io/'s modules bottom to top, its floors' subpackages): geodiag/io/__init__.py lists
    its floors, a subpackage's ``__init__`` lists its own modules in order (a subpackage of
    a floor, as ``vocabulary/sids/``, counts as one)."""
    import importlib
    import re

    def listed(package: str) -> list[str]:
        doc = importlib.import_module(package).__doc__
        return [f"{package}.{m}" for m in re.findall(r"^- ``(\w+)``", doc, re.M)]

    order, floors = [], {"geodiag.io"}
    for name in listed("geodiag.io"):
        if (ROOT / Path(*name.split(".")) / "__init__.py").is_file():
            order += listed(name)
            floors.add(name)
        else:
            order.append(name)
    return order, floors


def test_io_modules_import_only_those_listed_above_them():
    """geodiag/io's floors and each floor's modules are listed bottom to top; each module
    imports only earlier ones."""
    order, floors = io_order()
    modules = _modules()

    def unit(m: str) -> str:  # a floor's subpackage (vocabulary/sids/) is listed as one
        parts = m.split(".")
        return ".".join(parts[:4] if ".".join(parts[:3]) in floors else parts[:3])

    inside = [m for m in modules if m.startswith("geodiag.io.") and m not in floors]
    listed = {unit(m) for m in inside}
    assert set(order) == listed and len(order) == len(listed)  # every module listed, once
    pos = {m: i for i, m in enumerate(order)}
    upward = [
        (a, b)
        for a in inside
        for b in _imported(a, modules[a], modules)
        if b not in floors and pos.get(unit(b), -1) > pos[unit(a)]
    ]
    assert upward == []
