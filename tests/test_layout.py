"""The package's layout: every module says its job in a docstring, and no module imports
another that imports it back, however indirectly (an import inside a function or only for
type checking counts)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from . import docs

PACKAGE = Path(__file__).resolve().parent.parent / "headway"


def modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text(), str(path))
    return found


def test_every_module_says_its_job_in_a_docstring():
    missing = [name for name, tree in modules().items() if not ast.get_docstring(tree)]
    assert missing == []


def _statements(tree: ast.AST) -> Iterator[ast.stmt]:
    """Every statement of `tree`, those inside functions and those only for type checking
    too: a circle drawn for the type checker is still one a reader must follow."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.stmt):
            yield node
        yield from _statements(node)


def _imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The package's modules `name` imports, when it is imported, inside its functions or
    for type checking. The package itself is left out: it is
    a lazy façade over the client (`from headway import Client`), whose reading of
    `__version__` from it is no cycle."""
    package = name if name in known and any(k.startswith(name + ".") for k in known) else None
    base = (package or name.rpartition(".")[0]).split(".")
    found: set[str] = set()
    for node in _statements(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                stem = ".".join(
                    base[: len(base) - node.level + 1] + ([node.module] if node.module else [])
                )
            else:
                stem = node.module or ""
            for alias in node.names:
                for candidate in (f"{stem}.{alias.name}", stem):
                    if candidate in known:
                        found.add(candidate)
                        break
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
    return found - {name, "headway"}


def test_no_module_imports_itself_back():
    trees = modules()
    known = set(trees)
    graph = {name: _imports(name, tree, known) for name, tree in trees.items()}
    cycles = []
    for start in graph:
        stack, seen = [(start, (start,))], set()
        while stack:
            name, path = stack.pop()
            for imported in graph[name]:
                if imported == start:
                    cycles.append(" -> ".join((*path, start)))
                elif imported not in seen:
                    seen.add(imported)
                    stack.append((imported, (*path, imported)))
    assert cycles == []


def _readme_tree() -> set[str]:
    """The modules "How the code is laid out" (docs/layout.md) names, as paths under
    `headway/` (a folder named with `/` stands for all its files)."""
    block = docs.blocks(docs.page("layout"), "text")[0]
    named: set[str] = set()
    folders: list[str] = []
    for line in block.splitlines()[1:]:  # below `headway/`
        depth = (len(line) - len(line.lstrip(" "))) // 2 - 1
        names = line.strip().split("  ", 1)[0]
        if not names:
            continue
        for name in names.split(", "):
            if name.endswith("/"):
                del folders[depth:]
                folders.append(name)
            path = "".join(folders[:depth]) + name
            named.add(path)
    return named


def test_the_readme_names_every_module_in_its_layout():
    named = _readme_tree()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if path.name in ("__init__.py", "__main__.py"):
            continue
        if relative in named or any(
            relative.startswith(folder)
            for folder in named
            if folder.endswith("/")
            and not any(other.startswith(folder) and other != folder for other in named)
        ):
            continue
        missing.append(relative)
    assert missing == []


# What a folder must not import ("How the code is laid out", docs/layout.md): the rules know
# nothing of anything, storage nothing of what uses it, the use cases nothing of the edge.
NEVER = {
    "domain": {"*"},
    "storage": {"service", "caches", "coherence", "api", "live", "web", "cli", "app"},
    "service": {"api", "live", "web", "cli", "app"},
    "caches": {"service", "api", "live", "web", "cli", "app"},
    "progress": {"service", "caches", "coherence", "api", "live", "web", "cli", "app"},
}


def test_the_layers_point_one_way():
    trees = modules()
    known = set(trees)

    def folder(name: str) -> str:
        return name.split(".")[1] if "." in name else name

    wrong = []
    for name, tree in trees.items():
        never = NEVER.get(folder(name), set())
        for imported in _imports(name, tree, known):
            other = folder(imported)
            if other != folder(name) and ("*" in never or other in never):
                wrong.append(f"{name} -> {imported}")
    assert wrong == []
