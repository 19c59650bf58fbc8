"""One of each, held on the source (docs/architecture.md, "One of each"): JSON-RPC
envelopes are built only in acp_bridge/rpc, wire errors are made only by rpc itself and
by the one conversion (acp_bridge.host.errors), and every exception class acp-bridge
defines is in the one tree (`AcpBridgeError`).

Read with `ast` as tests/test_layers.py reads imports, so a rule holds for code on
every path, lazy imports and error branches included."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("acp_bridge", "session")
RPC = ROOT / "acp_bridge" / "rpc"
# Where an RpcError may be made: rpc's own refusals, and the one conversion.
WIRE_ERRORS = (RPC, ROOT / "acp_bridge" / "host" / "errors.py")
# What makes a wire error: the type, and rpc's builders of one.
MAKERS = frozenset({"RpcError", "as_sent", "invalid_params", "internal_error"})


def sources() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def inside(path: Path, *places: Path) -> bool:
    return any(path == place or path.is_relative_to(place) for place in places)


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"


def envelopes(tree: ast.AST) -> Iterator[ast.AST]:
    """Dicts with a `"jsonrpc"` key, and string or bytes constants that spell one."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and any(
                isinstance(k, ast.Constant) and k.value == "jsonrpc" for k in node.keys):
            yield node
        elif isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            text = node.value.decode(errors="replace") if isinstance(node.value, bytes) else node.value
            if '"jsonrpc"' in text:
                yield node


def made_errors(tree: ast.AST) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else \
                node.func.attr if isinstance(node.func, ast.Attribute) else None
            if name in MAKERS:
                yield node


def test_the_scan_finds_what_it_looks_for() -> None:
    # A scan that found nothing would pass every rule below.
    sample = ast.parse('m = {"jsonrpc": "2.0", "id": 1}\nraw = b\'{"jsonrpc":"2.0"}\'\n'
                       'e = RpcError(-32601, "x")\nf = protocol.invalid_params("y")\n')
    assert len(list(envelopes(sample))) == 2
    assert len(list(made_errors(sample))) == 2
    rpc = [p for p in sources() if inside(p, RPC)]
    assert any(list(envelopes(ast.parse(p.read_text(encoding="utf-8")))) for p in rpc)
    assert any(list(made_errors(ast.parse(p.read_text(encoding="utf-8")))) for p in rpc)


def test_json_rpc_envelopes_are_built_only_in_rpc() -> None:
    """A message is rpc's to frame (`Connection.notify`, `notify_update`,
    `notify_update_after_answer`, `request`, `response`): nothing else spells
    `"jsonrpc": "2.0"`, so the bytes of each kind of message have one source."""
    wrong = [where(path, node) for path in sources() if not inside(path, RPC)
             for node in envelopes(ast.parse(path.read_text(encoding="utf-8"), str(path)))]
    assert not wrong, "JSON-RPC envelopes built outside acp_bridge/rpc:\n" + "\n".join(wrong)


def test_wire_errors_are_made_only_by_rpc_and_the_one_conversion() -> None:
    """Domain code raises domain errors (acp_bridge.errors); only rpc (its own
    refusals) and acp_bridge.host.errors (`to_rpc_error`, `relayed`) make RpcErrors."""
    wrong = [where(path, node) for path in sources() if not inside(path, *WIRE_ERRORS)
             for node in made_errors(ast.parse(path.read_text(encoding="utf-8"), str(path)))]
    assert not wrong, "wire errors made outside rpc and host/errors.py:\n" + "\n".join(wrong)


# Run in a process of its own: every module is imported to find its classes.
EXCEPTIONS = r"""
import importlib, inspect, pkgutil, sys
import orjson
import acp_bridge, session
from acp_bridge.errors import AcpBridgeError
outside = []
for package in (acp_bridge, session):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and value.__module__ == info.name and issubclass(value, BaseException) \
                    and not issubclass(value, AcpBridgeError):
                outside.append(f"{info.name}.{name}")
sys.stdout.write(orjson.dumps(sorted(outside)).decode())
"""


@pytest.mark.integration
def test_every_exception_class_is_in_the_one_tree() -> None:
    done = subprocess.run([sys.executable, "-c", EXCEPTIONS], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=True)
    assert orjson.loads(done.stdout) == []
