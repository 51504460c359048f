"""The engine's layering: its import graph has no cycle, counting imports inside functions
(a function-level import hides a cycle, it does not remove it), and every function-level
import that remains says why on its line. Imports under ``TYPE_CHECKING`` are for the type
checker only and do not count."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "engine"


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ENGINE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(current: str, is_package: bool, node: ast.ImportFrom, modules: set[str]) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        parts = current.split(".")
        if not is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, node.module] if node.module else parts)
    # ``from . import jobs`` imports the module engine.jobs; ``from .action import Action``
    # imports engine.action.
    named = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
    return named or [base]


def type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def graph() -> tuple[dict[str, set[str]], list[str]]:
    files = {module_of(p): p for p in ENGINE.rglob("*.py") if "migrations" not in p.parts}
    edges: dict[str, set[str]] = {name: set() for name in files}
    unexplained: list[str] = []
    for name, path in files.items():
        source = path.read_text()
        tree = ast.parse(source)
        skipped = type_checking_lines(tree)
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.lineno in skipped:
                continue
            found = imported(name, path.name == "__init__.py", node, set(files))
            targets = [t for t in found if t in files and t != name]
            edges[name].update(targets)
            if targets and id(node) not in top_level and not _inside_if_main(tree, node):
                line = source.splitlines()[node.lineno - 1]
                if "#" not in line:
                    unexplained.append(f"{path.relative_to(ENGINE.parent)}:{node.lineno}: {line.strip()}")
    return edges, unexplained


def _inside_if_main(tree: ast.Module, target: ast.AST) -> bool:
    return any(
        isinstance(node, ast.If)
        and "__main__" in ast.unparse(node.test)
        and any(child is target for child in ast.walk(node))
        for node in tree.body
    )


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in edges:
        if node not in index:
            visit(node)
    return found


def test_the_engine_import_graph_has_no_cycle() -> None:
    edges, _ = graph()
    assert cycles(edges) == []


def test_every_function_level_import_says_why() -> None:
    _, unexplained = graph()
    assert unexplained == []
