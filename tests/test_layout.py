"""The layout's import rules, read from the source (every import, function-local ones included; those under
`if TYPE_CHECKING:` are left out, as they never run):

- `service.api` is HTTP only: nothing outside it imports it, except the `serve` command, which builds the app;
- `eval` (the evaluation library) imports nothing from `service`;
- every import goes down the layers (`LAYERS`, the order `service/__init__.py` draws): a package imports only from
  packages below it;
- no two modules import each other, directly or through others.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("service", "eval")
# the one way into the HTTP layer from outside it: `plumbline serve` builds the app (service/cli/main.py, _serve)
API_ENTRY = {("service.cli.main", "service.api.app")}
# bottom to top: a package may import from the packages on lower lines only (those on one line: from none another)
LAYERS = (
    ("eval",),
    ("service.errors", "service.domain"),
    ("service.inputs", "service.infra"),
    ("service.filters",),
    ("service.options",),
    ("service.state",),
    ("service.stores",),
    ("service.settings",),
    ("service.retrieval",),
    ("service.access",),
    ("service.index",),
    ("service.evaluation",),
    ("service.runtime",),
    ("service.application",),
    ("service.api", "service.cli"),
)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "migrations" in parts:  # Alembic's scripts, loaded by Alembic from files
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports: `from a.b import c` is `a.b.c` where that is a module, else `a.b`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t.split(".")[0] in PACKAGES and t != name)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: {t for t in imports(name, path, known) if t in known} for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
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
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read() -> None:
    edges = graph()
    assert "service.retrieval.pipeline" in edges["service.runtime"]
    assert "eval.runner" in edges["service.evaluation.runs"]


def test_nothing_outside_the_http_layer_imports_it() -> None:
    offending = sorted(
        (source, target)
        for source, targets in graph().items()
        for target in targets
        if target.startswith("service.api")
        and not source.startswith("service.api")
        and (source, target) not in API_ENTRY
    )
    assert offending == []


def test_the_eval_library_imports_nothing_from_the_service() -> None:
    edges = graph()
    offending = sorted(
        (s, t) for s, ts in edges.items() if s.split(".")[0] == "eval" for t in ts if t.startswith("service")
    )
    assert offending == []


def layer(module: str) -> tuple[str, int]:
    """The package of `module` as `LAYERS` names it, and its height."""
    for height, packages in enumerate(LAYERS):
        for package in packages:
            if module == package or module.startswith(package + "."):
                return package, height
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def test_every_import_goes_down_the_layers() -> None:
    upward = sorted(
        (source, target)
        for source, targets in graph().items()
        if source != "service"
        for target in targets
        if layer(source)[0] != layer(target)[0]
        and layer(target)[1] >= layer(source)[1]
        and (source, target) not in API_ENTRY
    )
    assert upward == []


def test_no_import_circles() -> None:
    assert cycles(graph()) == []


def test_a_circle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
