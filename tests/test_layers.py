"""The package's layout holds: no import circle between its modules, everything a user imports
under `fsm_agent`, and the subpackages' `__init__` files free of imports.

Every import counts, also one inside a function (a lazy import hides a circle, it does not
break it); only `if TYPE_CHECKING:` blocks do not, as they never run."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fsm_agent"
#: The repository's top-level directories importable only as fsm_agent.<name>.
LINKED = ("stores", "machines", "examples")


def modules(package: Path) -> dict[str, Path]:
    """Every module under `package` by dotted name (following the linked directories)."""
    found: dict[str, Path] = {}
    for dirpath, _dirs, files in os.walk(package, followlinks=True):
        for name in files:
            if name.endswith(".py"):
                path = Path(dirpath, name)
                parts = [package.name, *path.relative_to(package).with_suffix("").parts]
                if parts[-1] == "__init__":
                    parts.pop()
                found[".".join(parts)] = path
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for b in node.body for n in ast.walk(b))
    return skipped


def imports(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The modules of `known` that module `name` imports: `from a import b` counts as `a.b`
    when that is a module, else as `a`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = _type_checking_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                         for a in node.names)  # fmt: skip
    return {m for m in found if m in known and m != name}


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
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


def graph_of(package: Path) -> dict[str, set[str]]:
    known = modules(package)
    return {name: imports(name, path, known) for name, path in known.items()}


def test_no_import_circle() -> None:
    graph = graph_of(PACKAGE)
    assert len(graph) > 90, sorted(graph)  # the linked directories are walked too
    assert "fsm_agent.stores.sqlite" in graph
    found = circles(graph)
    shown = [" -> ".join(c) + f"  ({ {m: sorted(graph[m] & set(c)) for m in c} })" for c in found]
    assert not found, "import circles:\n" + "\n".join(shown)


def test_the_circle_finder_finds_circles(tmp_path: Path) -> None:
    """The check above can fail: a package with a lazy circle and a plain one is caught, and
    a TYPE_CHECKING-only import is not counted."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.sub.c import x\n")
    (pkg / "sub" / "c.py").write_text("from .. import a\nx = 1\n")
    (pkg / "d.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    import pkg.e\n")
    (pkg / "e.py").write_text("import pkg.d\n")
    assert circles(graph_of(pkg)) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_no_top_level_imports_of_the_linked_directories() -> None:
    """The package never imports `stores`, `machines`, `examples` or `tests` as top-level
    names: a user's own packages of those names must not be found instead."""
    known = modules(PACKAGE)
    wrong = []
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            wrong += [f"{name}: {n}" for n in names if n.split(".")[0] in (*LINKED, "tests")]
    assert not wrong


def test_subpackage_inits_import_nothing() -> None:
    """Importing `fsm_agent.runtime.x` runs `fsm_agent/runtime/__init__.py` first: each holds
    only its docstring, so a subpackage never drags in more than the module asked for."""
    for init in PACKAGE.glob("*/__init__.py"):
        if init.parent.name in LINKED:
            continue
        body = ast.parse(init.read_text(encoding="utf-8")).body
        assert all(isinstance(n, ast.Expr) for n in body), init


@pytest.mark.parametrize("name", LINKED)
def test_linked_directories_are_the_top_level_ones(name: str) -> None:
    """`fsm_agent/stores` is the repository's `stores/` (one copy of each file)."""
    link = PACKAGE / name
    assert link.is_symlink()
    assert link.resolve() == (ROOT / name).resolve()


def test_an_installed_checkout_does_not_put_top_level_names_on_the_path(tmp_path: Path) -> None:
    """In this (editable) install, from a directory of its own, `fsm_agent.stores` imports
    and `stores`, `machines`, `examples` and `tests` do not."""
    code = (
        "import importlib.util, fsm_agent.stores.sqlite, fsm_agent.examples.scenarios\n"
        "print([n for n in ('stores', 'machines', 'examples', 'tests')"
        " if importlib.util.find_spec(n) is not None])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
