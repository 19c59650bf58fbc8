"""`acp-bridge wrap --agent NAME=COMMAND ...` driven as the agent under test, and the
memory agent's command line (tests/support/memory_agent.py), for the tests of handing a
session to another agent (tests/test_wrap_switch*.py)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from tests.support.acp_client import AgentProcess
from tests.support.acp_schema import validate_def

MEMORY = Path(__file__).resolve().parent / "memory_agent.py"


def memory(name: str, *flags: str) -> list[str]:
    return [sys.executable, str(MEMORY), name, *flags]


def agent_args(agents: list[tuple[str, list[str]]]) -> list[str]:
    return [arg for name, command in agents for arg in ("--agent", f"{name}={shlex.join(command)}")]


class Switching(AgentProcess):
    """The wrapper with several `--agent`s, as the agent under test (every message it
    sends validated against the vendored schema, as for our own agent)."""

    def __init__(self, store: Path, agents: list[tuple[str, list[str]]], *wrap_args: str) -> None:
        super().__init__(store)
        self.command = [sys.executable, "-m", "acp_bridge", "wrap", "--store", str(store), *wrap_args,
                        *agent_args(agents)]

    async def __aenter__(self) -> Switching:
        await super().__aenter__()
        return self

    async def new(self, cwd: Path) -> dict[str, Any]:
        result = await self.request("session/new", {"cwd": str(cwd), "mcpServers": []})
        assert isinstance(result, dict)
        return result

    async def set_option(self, sid: str, config_id: str, value: str, *, timeout: float = 20) -> Any:
        params = {"sessionId": sid, "configId": config_id, "value": value}
        validate_def("SetSessionConfigOptionRequest", params)
        return await self.request("session/set_config_option", params, timeout=timeout)

    def text_of(self, sid: str, since: int = 0) -> str:
        return "".join(u["content"]["text"] for u in self.updates_of(sid)[since:]
                       if u["sessionUpdate"] == "agent_message_chunk")


def ours(options: list[dict[str, Any]], option_id: str = "agent") -> dict[str, Any]:
    found = [o for o in options if o["id"] == option_id and o["name"] == "Agent"]
    assert len(found) == 1, options
    validate_def("SessionConfigOption", found[0])
    return found[0]
