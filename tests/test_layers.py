"""The modules of batchpredict stand in layers: no module imports one that imports it back.

Read from the source with `ast`, so the check costs no import. Every `from . import x`,
`from .x import y` and `import batchpredict.x` counts, at module level or inside a function: an
import written inside a function to dodge a circle is still the circle.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "batchpredict"


def imports(source: str, package: str = "batchpredict") -> set[str]:
    """The package's modules that `source` imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module.split(".")[0]} if node.module else {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + "."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith(package + ".")}
    return found


def import_graph(folder: Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports."""
    return {path.stem: imports(path.read_text()) - {path.stem} for path in sorted(folder.glob("*.py"))}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle as [a, b, ..., a], or [] when the modules stand in layers."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str]:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return []
        for imported in sorted(graph.get(module, ())):
            cycle = visit(imported, path + [module])
            if cycle:
                return cycle
        done.add(module)
        return []

    for module in sorted(graph):
        cycle = visit(module, [])
        if cycle:
            return cycle
    return []


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph(PACKAGE)
    assert {"coordinator", "backend", "job", "cli"} <= set(graph)  # the package was found and read
    assert find_cycle(graph) == [], "import circle: " + " -> ".join(find_cycle(graph))


def test_the_check_sees_a_circle_however_it_is_written(tmp_path):
    (tmp_path / "job.py").write_text("import json\n")
    (tmp_path / "backend.py").write_text("from .job import Job\nfrom . import executor\n")
    (tmp_path / "executor.py").write_text("def run():\n    import batchpredict.coordinator\n")
    (tmp_path / "coordinator.py").write_text("from batchpredict.backend import make_executor\n")
    graph = import_graph(tmp_path)
    assert graph["backend"] == {"job", "executor"} and graph["executor"] == {"coordinator"}
    assert find_cycle(graph) == ["backend", "executor", "coordinator", "backend"]
    (tmp_path / "executor.py").write_text("from .job import Job\n")
    assert find_cycle(import_graph(tmp_path)) == []
