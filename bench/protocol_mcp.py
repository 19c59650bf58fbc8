"""The `mcp` section of bench/protocol.py (issue 16): what MCP servers cost at `session/new`.

In each of `repeat` processes of ours (jsonl), after `initialize`: `session/new` with no
MCP server twice (`none_ms`, the first session, which loads the turn machinery;
`none_warm_ms`), then with one stdio server (`mcp-server-time` from PyPI, installed beside
this Python by the `test` extra) twice, then with none again. The first session with a
server also imports the MCP SDK (once per process); a later one only starts its server:
`added_first_ms` and `added_again_ms` are each over `none_warm_ms`. `none_after_ms` (no
server, after the SDK was loaded) tells that a session without servers pays nothing for
them. And `sdk_modules`: how many modules of the SDK (mcp, mcp_types, pydantic) one
process imported (`-X importtime`) after a session and a turn without servers (0: the
`startup` section's numbers, whose `session/new` carries no servers, are those of an
agent without MCP support; tests/test_fast_paths.py holds it too) and with one.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

from bench.common import CWD
from bench.protocol_agents import Ctx, ours


def time_server() -> str | None:
    beside = Path(sys.executable).parent / "mcp-server-time"
    return str(beside) if beside.exists() else shutil.which("mcp-server-time")


def _new_ms(agent: Any, servers: list[dict[str, Any]], cwd: str) -> float:
    t0 = time.perf_counter()
    result = agent.request("session/new", {"cwd": cwd, "mcpServers": servers})[0]
    elapsed = (time.perf_counter() - t0) * 1e3
    for status in result.get("_meta", {}).get("acpBridge", {}).get("mcpServers", []):
        if "error" in status:
            raise RuntimeError(f"the MCP server did not start: {status['error']}")
    return elapsed


def bench_mcp(ctx: Ctx, repeat: int) -> dict[str, Any]:
    command = time_server()
    if command is None:
        return {"skipped": "mcp-server-time is not installed (pip install -e '.[test]')"}
    server = [{"name": "time", "command": command, "args": [], "env": []}]
    runs: dict[str, list[float]] = {"none_ms": [], "none_warm_ms": [], "first_ms": [], "again_ms": [],
                                    "none_after_ms": []}
    for _ in range(repeat):
        with ctx.spawn(ours("jsonl")) as agent:
            agent.initialize()
            runs["none_ms"].append(_new_ms(agent, [], CWD))
            runs["none_warm_ms"].append(_new_ms(agent, [], CWD))
            # A server starts in the session's folder: here one that exists.
            runs["first_ms"].append(_new_ms(agent, server, str(ctx.root)))
            runs["again_ms"].append(_new_ms(agent, server, str(ctx.root)))
            runs["none_after_ms"].append(_new_ms(agent, [], CWD))
    out: dict[str, Any] = {name: median(values) for name, values in runs.items()}
    out["added_first_ms"] = out["first_ms"] - out["none_warm_ms"]
    out["added_again_ms"] = out["again_ms"] - out["none_warm_ms"]
    out["server"] = "mcp-server-time"
    out["runs"] = repeat
    out["sdk_modules"] = sdk_modules(ctx, server)
    return out


def sdk_modules(ctx: Ctx, server: list[dict[str, Any]]) -> dict[str, int]:
    """How many modules of the MCP SDK (mcp, mcp_types, pydantic) one process of ours
    (`-X importtime`) has imported after a session and a turn without servers, and after a
    session with one: the first must be 0."""
    counts: dict[str, int] = {}
    for label, servers in (("without_servers", []), ("with_one_server", server)):
        with ctx.spawn(ours("jsonl"), prefix=("-X", "importtime")) as agent:
            agent.initialize()
            cwd = str(ctx.root) if servers else CWD
            sid = agent.request("session/new", {"cwd": cwd, "mcpServers": servers})[0]["sessionId"]
            agent.prompt(sid, "hi")
            stderr_path = agent.stderr_path
        names = [line.rsplit("|", 1)[1].strip() for line in stderr_path.read_text(errors="replace").splitlines()
                 if line.startswith("import time:") and "|" in line]
        counts[label] = sum(1 for n in names if n.split(".")[0] in ("mcp", "mcp_types", "pydantic"))
    return counts


def render_mcp(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"\nMCP at session/new: skipped ({result['skipped']})"
    return "\n".join([
        "",
        f"MCP at session/new (ours-jsonl, one stdio server: {result['server']}, median of {result['runs']}):",
        f"  no server, first in process    {result['none_ms']:8.1f} ms  (loads the turn machinery)",
        f"  no server, again               {result['none_warm_ms']:8.1f} ms",
        f"  one server, first in process   {result['first_ms']:8.1f} ms  (+{result['added_first_ms']:.1f} ms:"
        " imports the MCP SDK, starts the server, lists its tools)",
        f"  one server, again              {result['again_ms']:8.1f} ms  (+{result['added_again_ms']:.1f} ms:"
        " starts the server, lists its tools)",
        f"  no server, after those         {result['none_after_ms']:8.1f} ms",
        f"  modules of the MCP SDK (mcp, mcp_types, pydantic) imported: "
        f"{result['sdk_modules']['without_servers']} by a session without servers, "
        f"{result['sdk_modules']['with_one_server']} with one",
    ])
