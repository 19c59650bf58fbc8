"""The agents the official SDK clients drive (tests/test_sdk_clients.py,
tests/test_sdk_client_rules.py), and the clients themselves, as pytest parameters.

Three agents:

- `serve`: our agent, on a `script:` model (tool calls, permission requests, a turn that
  hangs until cancelled) with an `openai:` model beside it, so that it advertises
  `authenticate` and `logout` (a key in the environment; the provider's address is a
  closed loopback port: `authenticate` keeps a key it cannot check, docs/protocol.md);
- `wrap-serve`: `acp-bridge wrap` in front of that agent;
- `wrap-echo`: `acp-bridge wrap` in front of the official Python SDK's echo agent
  (bench/sdk_echo_agent.py), which has no load, modes or tools and ignores
  `session/cancel`: it streams the prompt back word by word and answers `end_turn`.

Clients: the Python SDK always, and each TypeScript SDK `$ACP_BRIDGE_TEST_TS_SDK` names
(tests/support/ts_client.py); without one, a TypeScript parameter that skips.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.py_sdk_client import PyClient
from tests.support.sdk_clients import SdkClient
from tests.support.ts_client import ENV, TsClient, sdk_folders, sdk_version
from tests.support.wrapped import SDK_ECHO_AGENT

AGENTS = ("serve", "wrap-serve", "wrap-echo")
CANCEL_GRACE_S = 5.0  # the wrapper's default (docs/wrap.md, "The cancel grace")
OPENAI_MODEL = "openai:gpt-test"


def client_params() -> list[Any]:
    folders = sdk_folders()
    ts = [pytest.param(str(f), id=f"ts-{sdk_version(f)}") for f in folders] or [
        pytest.param("", id="ts", marks=pytest.mark.skip(reason=f"set ${ENV} (.ci/run does)"))]
    return [pytest.param("python", id="py"), *ts]


@dataclass(frozen=True)
class Setup:
    """Where one test runs: its agent and the files it uses."""

    agent: str  # one of AGENTS
    tmp: Path

    @property
    def work(self) -> Path:
        return self.tmp / "work"

    @property
    def ours(self) -> bool:
        """Our agent answers the turns (a `script:` model), not the echo agent."""
        return self.agent != "wrap-echo"

    def command(self, steps: list[dict[str, Any]]) -> list[str]:
        script = self.tmp / "model.json"
        script.write_bytes(orjson.dumps({"steps": steps}))
        serve = [sys.executable, "-m", "acp_bridge", "serve", "--store", str(self.tmp / "store"),
                 "--model", f"script:{script}", "--model", OPENAI_MODEL]
        if self.agent == "serve":
            return serve
        child = serve if self.agent == "wrap-serve" else [sys.executable, str(SDK_ECHO_AGENT)]
        return [sys.executable, "-m", "acp_bridge", "wrap", "--store", str(self.tmp / "wrap-store"), "--", *child]

    def env(self) -> dict[str, str]:
        return {"OPENAI_API_KEY": "sk-test-0123456789", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
                "XDG_CONFIG_HOME": str(self.tmp / "config"), "PYTHONUNBUFFERED": "1"}


@asynccontextmanager
async def sdk_client(client: str, setup: Setup, steps: list[dict[str, Any]] | None = None, *,
                     command: list[str] | None = None) -> AsyncIterator[SdkClient]:
    """`client` ("python" or a TypeScript SDK folder) running `setup`'s agent on a script of
    `steps` (or `command`); the traffic checked (SdkClient.check_traffic) once it closed
    the agent."""
    setup.work.mkdir(exist_ok=True)
    command = command or setup.command(steps or [])
    driver: PyClient | TsClient
    if client == "python":
        driver = PyClient(command, cwd=setup.tmp, env=setup.env(), stderr_file=setup.tmp / "agent.stderr")
    else:
        driver = TsClient(Path(client), command, cwd=setup.tmp, env=setup.env())
    async with driver:
        yield driver
        assert await driver.close() == 0, f"the agent exited with {driver.exit_code}"
    driver.check_traffic()


INITIALIZE = {"protocolVersion": 1,
              "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True},
                                     "elicitation": {"form": {}}},
              "clientInfo": {"name": "acp-bridge-tests", "version": "0"}}


async def initialize(client: SdkClient) -> dict[str, Any]:
    answer: dict[str, Any] = await client.request("initialize", INITIALIZE)
    assert answer["protocolVersion"] == 1, answer
    return answer


async def new_session(client: SdkClient, setup: Setup, servers: list[dict[str, Any]] | None = None) -> str:
    answer = await client.request("session/new", {"cwd": str(setup.work), "mcpServers": servers or []},
                                  timeout=60)
    return str(answer["sessionId"])


def words(n: int) -> str:
    """A prompt of `n` words: the echo agent streams it back as `n` chunks."""
    return " ".join(f"w{i}" for i in range(n))
