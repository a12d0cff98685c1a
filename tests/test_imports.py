"""The runner's modules import each other without a cycle, and at the top of the module: a
function-local import is only for what costs start-up time or may not be installed (PySpark,
dbt, the optional adapters' clients) or for a runner module that imports PySpark itself.

Read from the source with `ast` (nothing is imported); `if TYPE_CHECKING:` blocks do not count,
they never run."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers.project import REPO

RUNNER = REPO / "runner"

# Third-party roots a function may import: heavy at start-up, or an optional extra.
LAZY_ALLOWED = {
    "pyspark",
    "py4j",
    "dbt",
    "dbt_common",
    "google",
    "databricks",
    "psycopg2",
    "fsspec",
    "sqlalchemy",
    "pyarrow",
    "numpy",
    "watchdog",  # only `runner run --watch` needs it
    "prometheus_client",  # only `runner metrics` and `--metrics-port` need it
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in RUNNER.rglob("*.py") if "dbt_package" not in p.parts}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module, at module level) for every import that runs."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub, top)
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name, top) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append((child.module, top))
                found.extend((f"{child.module}.{a.name}", top) for a in child.names)
            inner = top and not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            visit(child, inner)

    visit(tree, True)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: {m for m, _ in imports(path) if m in known and m != name}
        for name, path in known.items()
    }


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := walk(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := walk(node)):
            return cycle
    return None


def test_no_import_cycle_among_the_runner_modules() -> None:
    edges = graph()
    assert len(edges) > 30  # the walk found the package
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_function_local_imports_are_only_for_pyspark_dbt_and_optional_adapters() -> None:
    known = modules()
    # runner modules that import PySpark at their top: importing them is importing PySpark
    spark_bound = {
        name
        for name, path in known.items()
        if any(m.split(".")[0] == "pyspark" and top for m, top in imports(path))
    }
    wrong = []
    for name, path in sorted(known.items()):
        for module, top in imports(path):
            if top or module.split(".")[0] in LAZY_ALLOWED or module in spark_bound:
                continue
            if module.startswith("runner.") and module not in known:
                continue  # `from runner.x import name`: the name, not a module
            wrong.append(f"{name}: {module}")
    assert not wrong, "imports inside functions that belong at the top:\n" + "\n".join(wrong)
