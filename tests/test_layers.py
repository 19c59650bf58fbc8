"""The layers of docs/architecture.md, held: who may import whom, no cycles, no
private names taken across modules.

Read from the source with `ast`, every import statement counted (function-level
imports too: a lazy import is still a dependency), so a rule cannot be dodged by
moving an import into a function.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("acp_bridge", "session")
OURS = (*PACKAGES, "tests", "bench")

# The layer of a module: the longest of these prefixes that it starts with.
# Each layer may import the layers listed for it (and itself); nothing else of ours.
ALLOWED: dict[str, frozenset[str]] = {
    "session": frozenset(),
    "acp_bridge": frozenset({"session"}),  # the package's own top-level modules
    "acp_bridge.rpc": frozenset({"acp_bridge"}),
    "acp_bridge.models": frozenset({"acp_bridge", "session"}),
    "acp_bridge.tools": frozenset({"acp_bridge", "session"}),
    # The one host of every ACP session, below the engines that run turns for it.
    "acp_bridge.host": frozenset({"acp_bridge", "acp_bridge.rpc", "session"}),
    "acp_bridge.agent": frozenset({"acp_bridge", "acp_bridge.rpc", "acp_bridge.host", "acp_bridge.models",
                                   "acp_bridge.tools", "session"}),
    "acp_bridge.wrap": frozenset({"acp_bridge", "acp_bridge.rpc", "acp_bridge.host", "acp_bridge.tools",
                                  "session"}),
    # The client side of ACP (an agent child's connection, the fs/terminal it serves).
    "acp_bridge.client": frozenset({"acp_bridge", "acp_bridge.rpc", "acp_bridge.tools"}),
    "acp_bridge.cli": frozenset({"acp_bridge", "acp_bridge.rpc", "acp_bridge.host", "acp_bridge.models",
                                 "acp_bridge.tools", "acp_bridge.client", "acp_bridge.snapshot",
                                 "acp_bridge.agent", "acp_bridge.wrap", "session"}),
    # The snapshot harness runs the agent only as a subprocess, as an editor does; its
    # fake agent is an engine of the host.
    "acp_bridge.snapshot": frozenset({"acp_bridge", "acp_bridge.rpc", "acp_bridge.host", "acp_bridge.models",
                                      "acp_bridge.tools", "acp_bridge.client", "session"}),
    "acp_bridge.__main__": frozenset({"acp_bridge.cli"}),
}
# The engines are run by the CLI through their one entry each, never taken apart (a
# narrower rule than the layers, held below).
ENGINE_ENTRIES = frozenset({"acp_bridge.agent.serve", "acp_bridge.wrap.serve"})


@dataclass(frozen=True)
class Import:
    importer: str  # module name
    target: str  # module name imported (or the module a name is taken from)
    names: tuple[str, ...]  # names taken with `from target import ...`
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


MODULES = {module_name(p): p for p in source_files()}


def is_ours(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def resolve(name: str) -> str:
    """The module that `name` (a module, or a name inside one) lives in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports_of(module: str) -> Iterator[Import]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if is_ours(alias.name):
                    yield Import(module, resolve(alias.name), (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if not is_ours(base):
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in MODULES:  # `from package import module`
                    yield Import(module, submodule, (), node.lineno)
                else:
                    yield Import(module, resolve(base), (alias.name,), node.lineno)


ALL_IMPORTS = [imp for module in MODULES for imp in imports_of(module)]


def layer(module: str) -> str:
    if module.split(".")[0] == "session":
        return "session"
    best = "acp_bridge"
    for name in ALLOWED:
        if (module == name or module.startswith(name + ".")) and len(name) > len(best):
            best = name
    return best


def test_the_scan_sees_the_tree() -> None:
    # The rules below are only as good as the scan: it must find the layers and the
    # imports between them (a scan that found nothing would pass every rule).
    layers = {layer(m) for m in MODULES}
    assert set(ALLOWED) <= layers | {"acp_bridge"}, sorted(set(ALLOWED) - layers)
    edges = {(layer(i.importer), layer(i.target)) for i in ALL_IMPORTS}
    assert ("acp_bridge.agent", "session") in edges
    assert ("acp_bridge.agent", "acp_bridge.rpc") in edges
    assert ("acp_bridge.__main__", "acp_bridge.cli") in edges


def test_layers_import_only_downwards() -> None:
    wrong = []
    for imp in ALL_IMPORTS:
        src, dst = layer(imp.importer), layer(imp.target)
        if src == dst or dst in ALLOWED[src]:
            continue
        wrong.append(f"{MODULES[imp.importer].relative_to(ROOT)}:{imp.line}: "
                     f"{imp.importer} ({src}) imports {imp.target} ({dst})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_cli_runs_an_engine_only_through_its_entry() -> None:
    wrong = [f"{MODULES[imp.importer].relative_to(ROOT)}:{imp.line}: {imp.importer} imports {imp.target}"
             for imp in ALL_IMPORTS
             if layer(imp.importer) == "acp_bridge.cli" and layer(imp.target) in ("acp_bridge.agent", "acp_bridge.wrap")
             and imp.target not in ENGINE_ENTRIES]
    assert not wrong, "the CLI takes an engine apart:\n" + "\n".join(wrong)


def test_no_private_names_across_modules() -> None:
    wrong = [
        f"{MODULES[imp.importer].relative_to(ROOT)}:{imp.line}: {imp.importer} takes "
        f"{', '.join(n for n in imp.names if n.startswith('_'))} from {imp.target}"
        for imp in ALL_IMPORTS
        if imp.target != imp.importer and any(
            n.startswith("_") and not n.startswith("__") for n in imp.names)
    ]
    private_modules = [
        f"{MODULES[imp.importer].relative_to(ROOT)}:{imp.line}: {imp.importer} imports {imp.target}"
        for imp in ALL_IMPORTS
        if any(part.startswith("_") and not part.startswith("__") for part in imp.target.split("."))
        and imp.target.rpartition(".")[0] != imp.importer.rpartition(".")[0]
    ]
    assert not wrong + private_modules, "private names taken across modules:\n" + "\n".join(
        wrong + private_modules)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in ALL_IMPORTS:
        if imp.target != imp.importer and imp.target:
            graph[imp.importer].add(imp.target)
    return graph


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_cycles_finds_rings(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert cycles(graph) == expected


def test_no_import_cycles() -> None:
    # A package's __init__ importing its own submodules is not a cycle of layers, but
    # a submodule importing its package's __init__ back would be: both are counted.
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_tests_and_bench_do_not_import_each_other_in_a_circle() -> None:
    # bench may use the test support package (the crash-matrix engine, the ACP client);
    # tests may use bench's modules (smoke tests load them from file, a test agent
    # builds on the SDK echo agent) only where those import nothing of tests, and the
    # support package imports no test module.
    def imported(path: Path) -> Iterator[tuple[str, int]]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                yield from ((alias.name, node.lineno) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                yield node.module, node.lineno

    tests = sorted((ROOT / "tests").rglob("*.py"))
    assert any(p.parent.name == "support" for p in tests)
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: imports {name}"
        for path in tests
        for name, line in imported(path)
        if "support" in path.parts and name.startswith("tests.") and not name.startswith("tests.support")
    ]
    imported_by_tests = {name.split(".")[1] for path in tests for name, _ in imported(path)
                         if name.startswith("bench.")}
    # The bench files tests load by path or import, and what they import of bench in
    # turn, import nothing of tests: otherwise the two would form a circle.
    loaded = {m.group(1) for path in tests
              for m in re.finditer(r'"bench" / "(\w+)\.py"', path.read_text(encoding="utf-8"))}
    assert loaded, "the smoke tests load no bench file: the scan is out of date"
    loaded |= imported_by_tests
    seen: set[str] = set()
    while loaded - seen:
        name = min(loaded - seen)
        seen.add(name)
        for target, line in imported(ROOT / "bench" / f"{name}.py"):
            if target.startswith("bench."):
                loaded.add(target.split(".")[1])
            elif target.split(".")[0] == "tests":
                wrong.append(f"bench/{name}.py:{line}: used by tests, imports {target}")
    assert not wrong, "tests and bench import each other:\n" + "\n".join(wrong)


def test_tests_and_bench_take_no_private_names() -> None:
    # A test that needs a name makes it public first; a white-box test may still patch
    # a method of a class it imports (fault injection), which is not an import.
    wrong = []
    for path in sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OURS:
                wrong += [f"{path.relative_to(ROOT)}:{node.lineno}: {alias.name} from {node.module}"
                          for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert not wrong, "private names imported by tests or bench:\n" + "\n".join(wrong)


# The pure parts take data and return data: no I/O, no clock, no tasks. Besides our own
# pure modules they may use only these.
PURE_MODULES = ("acp_bridge.rpc.protocol", "acp_bridge.content", "acp_bridge.host.settlement",
                "acp_bridge.wrap.record", "acp_bridge.wrap.prompt_answers", "acp_bridge.wrap.calls",
                "acp_bridge.wrap.compactions",
                "acp_bridge.snapshot.normalize", "acp_bridge.host.updates", "acp_bridge.host.advertised",
                "acp_bridge.tools.permissions", "session.events",
                "acp_bridge.models.base", "acp_bridge.models.catalog", "acp_bridge.models.options",
                "session.invariants", "session.repair", "session.transcript", "session.scan",
                "session.items", "session.typed", "session.closers", "session.titles", "session.tracker_state",
                "session.reason_checks",
                "acp_bridge.prices",
                "acp_bridge.wrap.state", "acp_bridge.wrap.signals", "acp_bridge.wrap.lifecycle",
                "acp_bridge.wrap.child_runs",
                "acp_bridge.wrap.initialize", "acp_bridge.cli.importer.native", "acp_bridge.cli.importer.records",
                "acp_bridge.cli.importer.formats", "acp_bridge.cli.importer.claude_code",
                "acp_bridge.cli.importer.codex", "acp_bridge.cli.importer.gemini", "acp_bridge.cli.importer.qwen",
                "acp_bridge.cli.importer.opencode")
# datetime: the readers of native transcripts parse ISO times with it (never the clock).
PURE_STDLIB = frozenset({"__future__", "collections", "collections.abc", "dataclasses", "enum",
                         "functools", "itertools", "math", "re", "typing", "orjson", "datetime"})


def test_pure_modules_import_nothing_that_does_io() -> None:
    errors = {"session.errors", "acp_bridge.errors"}  # the error types: plain exceptions
    pure = set(PURE_MODULES) | errors
    assert pure - errors <= set(MODULES)
    wrong = []
    for module in PURE_MODULES:
        path = MODULES[module]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""])
            for name in names:
                ok = resolve(name) in pure if is_ours(name) else name in PURE_STDLIB
                if not ok:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {module} imports {name}")
    assert not wrong, "pure modules importing more than data:\n" + "\n".join(wrong)
