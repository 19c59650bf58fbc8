"""The client side of a snapshot run: the real stdio agent (`python -m acp_bridge serve`)
as a subprocess, driven through a scenario's steps, every message kept in the order the
client saw it.

The agent is only ever run as a process: the harness sees what an editor sees. As an
editor does, the client serves `fs/*` (in the workspace copy) and `terminal/*` (the
chat's own, acp_bridge.client.methods) to a scenario that advertises them. The
connection is the chat's too (acp_bridge.client.connection), its traffic taken on the
wire (`Tap`).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson

from acp_bridge.client.connection import AgentConnection
from acp_bridge.client.methods import ClientMethods
from acp_bridge.errors import (
    AgentGone,
    ClientParamsError,
    ClientResourceNotFoundError,
    ClientServiceError,
    MethodNotFoundError,
    ScenarioError,
)
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.host.params import check_client_params
from acp_bridge.models.replay_models import MODELS_ENV as REPLAY_MODELS_ENV
from acp_bridge.rpc.protocol import ClientError, RpcError
from acp_bridge.rpc.transport import LineReader, StreamLineReader, StreamWriter, TooLong, Writer
from acp_bridge.snapshot.scenario import Scenario, Step

Traffic = list[tuple[str, Any]]  # ("->" client to agent | "<-" agent to client, message)
REQUEST_TIMEOUT = 30.0  # seconds a step's request may take
EXIT_TIMEOUT = 15.0  # seconds the agent may take to exit after its input ends
CLIENT_INFO = {"name": "acp-bridge-snapshot", "version": "1"}


@dataclass
class Run:
    """What a run left: its traffic, the recorded session, the agent's stderr."""

    root: Path  # the run's temporary folder
    workspace: Path  # the session cwd
    store: Path
    traffic: Traffic = field(default_factory=list)
    session_id: str | None = None
    stderr: str = ""
    # Whether a prompt's `expectError` is held: not when recording a scenario whose
    # overrides make the replay fail where the real model did not.
    hold_expectations: bool = True

    @property
    def log_path(self) -> Path | None:
        if self.session_id is None:
            return None
        return self.store / "sessions" / f"{self.session_id}.jsonl"


class Tap:
    """The run's traffic, taken on the wire: every line the agent wrote, as it is read
    (before the connection acts on it), and every message we send, as it is written."""

    def __init__(self, traffic: Traffic, reader: LineReader, writer: Writer) -> None:
        self.traffic = traffic
        self.reader = reader
        self.writer = writer
        self.max_line = reader.max_line

    async def lines(self) -> AsyncIterator[bytes | TooLong]:
        async for line in self.reader.lines():
            if isinstance(line, bytes) and line.strip():
                try:
                    self.traffic.append(("<-", orjson.loads(line)))
                except orjson.JSONDecodeError:
                    raise ScenarioError(f"the agent wrote a line that is not JSON on stdout: {line[:200]!r}") from None
            yield line

    async def write(self, data: bytes) -> None:
        self.traffic.extend(("->", orjson.loads(line)) for line in data.split(b"\n") if line)
        await self.writer.write(data)


class AgentProcess:
    """One agent process of a run, and the client connection talking to it."""

    def __init__(self, run: Run, command: list[str], env: Mapping[str, str]) -> None:
        self.run = run
        self.command = command
        self.env = dict(env)
        self.answers: list[str] = []  # permission answers left for the running prompt
        self.cancel_after: int | None = None  # updates of the running prompt before a cancel
        self.updates = 0
        self._stderr = bytearray()
        self.serves_terminal = False  # the scenario's initialize advertised `terminal`
        self.client: ClientMethods | None = None

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        # `terminal/*` served as `acp-bridge chat` serves them: commands run here, in
        # the run's task group (none outlives the run).
        self.client = ClientMethods(tg, ask_permission=self._no_permission, check=check_client_params)
        self.proc = proc = await anyio.open_process(self.command, cwd=self.run.root, env=self.env)
        assert proc.stdout is not None and proc.stdin is not None
        tap = Tap(self.run.traffic, StreamLineReader(proc.stdout), StreamWriter(proc.stdin))
        # Our requests numbered 1, 2, 3, ... as an editor numbers them.
        self.conn = AgentConnection(proc, self.answer_agent, inline={"session/update": self._on_update},
                                    error_for=answers_or_fails, ids=itertools.count(1), reader=tap, writer=tap)
        tg.start_soon(self.conn.run)
        tg.start_soon(self._read_stderr)

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for chunk in self.proc.stderr:
            self._stderr += chunk

    def _on_update(self, _: Any) -> None:
        self.updates += 1
        if self.cancel_after is not None and self.updates >= self.cancel_after:
            self.cancel_after = None
            self.cancel()

    async def answer_agent(self, method: str, params: dict[str, Any]) -> Any:
        """The client's answer to the agent's request `method` (the connection's `serve`)."""
        if method == "session/request_permission":
            answer = self.answers.pop(0) if self.answers else "cancelled"
            if answer == "cancel":
                self.cancel()
            return {"outcome": _outcome(answer, params)}
        if method in ("fs/read_text_file", "fs/write_text_file"):
            check_client_params(method, params)
            return self._file(method, params)
        if method.startswith("terminal/") and self.serves_terminal and self.client is not None:
            return await self.client.serve(method, params)
        raise MethodNotFoundError(f"the snapshot client serves no {method}")

    @staticmethod
    async def _no_permission(**_: Any) -> Any:
        raise ClientServiceError("the snapshot client answers permissions itself")  # never routed here

    def _file(self, method: str, params: dict[str, Any]) -> Any:
        """The client's files, for a scenario that advertises `fs`: the session's own
        folder only (the workspace copy), as an editor serves its open project."""
        path = Path(str(params.get("path", "")))
        if not path.resolve().is_relative_to(self.run.workspace):
            raise ClientParamsError(f"{path} is outside the workspace")
        try:
            if method == "fs/write_text_file":
                path.write_text(str(params.get("content", "")), encoding="utf-8")
                return {}
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        except OSError as exc:
            raise ClientResourceNotFoundError(f"{path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ClientParamsError(f"{path} is not UTF-8 text") from None
        start = max(int(params.get("line") or 1) - 1, 0)
        limit = params.get("limit")
        return {"content": "".join(lines[start:start + limit] if limit else lines[start:])}

    def cancel(self) -> None:
        if self.run.session_id is not None:
            self.conn.notify("session/cancel", {"sessionId": self.run.session_id})

    async def cancel_soon(self) -> None:
        self.cancel()

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The agent's answer: `{"result": ...}` or `{"error": ...}`."""
        with anyio.move_on_after(REQUEST_TIMEOUT):
            try:
                return {"result": await self.conn.request(method, params)}
            except ClientError as exc:
                return {"error": exc.error}
            except AgentGone:
                raise ScenarioError(f"{method}: the agent exited without answering{self._stderr_tail()}") from None
        raise ScenarioError(f"{method}: no answer in {REQUEST_TIMEOUT:.0f} s (a hang nothing cancelled?)")

    async def stop(self) -> int:
        """End its input and wait for it to exit (killed if it does not)."""
        status = await self.conn.stop(EXIT_TIMEOUT)
        if self.client is not None:  # commands the agent left running die with it
            await self.client.terminals.close_all()
        self.run.stderr += self._stderr.decode(errors="replace")
        return status

    def _stderr_tail(self) -> str:
        text = self._stderr.decode(errors="replace").strip()
        return f"; its stderr ends: {text[-500:]}" if text else ""


def answers_or_fails(exc: BaseException) -> RpcError:
    """How the client answers a failure of its own: what its services refuse, as every
    connection answers it (to_rpc_error); anything else (a permission request without
    the option the scenario answers, a failure that says our code is wrong) ends the run."""
    if isinstance(exc, ClientServiceError | MethodNotFoundError) and not exc.bug:
        return to_rpc_error(exc)
    raise exc


def _outcome(answer: str, params: dict[str, Any]) -> dict[str, Any]:
    if answer in ("cancelled", "cancel"):
        return {"outcome": "cancelled"}
    for option in params.get("options", []):
        if option.get("kind") == answer:
            return {"outcome": "selected", "optionId": option["optionId"]}
    raise ScenarioError(f"the agent's permission request offers no {answer} option: {params.get('options')}")


def agent_command(run: Run, models: Sequence[str], scenario: Scenario) -> list[str]:
    """`serve` with `models` (the first the default); for a wrap scenario, `wrap` in
    front of its command when recording, or of the fake agent serving the recording
    (`models` = [replay:LOG])."""
    agent = [sys.executable, "-m", "acp_bridge"]
    if scenario.wrap:
        if models[0].startswith("replay:"):
            child = [*agent, "snapshot", "fake-agent", models[0].partition(":")[2]]
        else:
            child = [arg.replace("{python}", sys.executable).replace("{scenario}", str(scenario.folder.resolve()))
                     .replace("{tmp}", str(run.root)) for arg in scenario.wrap]
        return [*agent, "wrap", "--store", str(run.store), "--backend", "jsonl", "--", *child]
    command = [*agent, "serve", "--store", str(run.store), "--backend", "jsonl"]
    command += [arg for model in models for arg in ("--model", model)]
    if scenario.max_steps is not None:
        command += ["--max-steps", str(scenario.max_steps)]
    return command


async def drive(scenario: Scenario, run: Run, command: list[str], env: Mapping[str, str]) -> None:
    """Run every step of `scenario` against the agent; the traffic lands in `run`."""
    async with anyio.create_task_group() as tg:
        agent = AgentProcess(run, command, env)
        await agent.start(tg)
        try:
            for number, step in enumerate(scenario.steps, start=1):
                try:
                    agent = await _step(agent, step, run, tg)
                except ScenarioError as exc:
                    raise ScenarioError(f"{scenario.name}: step {number} ({step.op}): {exc}") from None
        finally:
            with anyio.CancelScope(shield=True):
                if agent.proc.returncode is None:
                    await agent.stop()
        tg.cancel_scope.cancel()


async def _step(agent: AgentProcess, step: Step, run: Run, tg: anyio.abc.TaskGroup) -> AgentProcess:
    args, sid = step.args, run.session_id
    if step.op == "initialize":
        capabilities = args.get("clientCapabilities", {})
        agent.serves_terminal = isinstance(capabilities, dict) and capabilities.get("terminal") is True
        answer = await agent.request("initialize", {
            "protocolVersion": 1, "clientCapabilities": capabilities, "clientInfo": CLIENT_INFO})
    elif step.op == "new_session":
        params: dict[str, Any] = {"cwd": str(run.workspace), "mcpServers": []}
        if "additionalDirectories" in args:
            params["additionalDirectories"] = args["additionalDirectories"]
        answer = await agent.request("session/new", params)
        run.session_id = answer.get("result", {}).get("sessionId")
    elif step.op == "prompt":
        prompt = args.get("prompt") or [{"type": "text", "text": args["text"]}]
        agent.answers = list(args.get("permissions", []))
        agent.updates, agent.cancel_after = 0, args.get("cancelAfterUpdates")
        if agent.cancel_after == 0:
            tg.start_soon(agent.cancel_soon)  # right behind the prompt
        answer = await agent.request("session/prompt", {"sessionId": sid, "prompt": prompt})
        agent.cancel_after = None
        if not run.hold_expectations:
            return agent
        if "error" in answer and not args.get("expectError"):
            raise ScenarioError(f"answered with an error: {answer['error']}")
        if "error" not in answer and args.get("expectError"):
            raise ScenarioError(f"expected an error, got {answer.get('result')}")
        return agent
    elif step.op == "set_mode":
        answer = await agent.request("session/set_mode", {"sessionId": sid, "modeId": args["mode"]})
    elif step.op == "set_config":
        answer = await agent.request("session/set_config_option", {"sessionId": sid, "configId": args["configId"],
                                                                   "value": args["value"]})
    elif step.op in ("load", "resume"):
        answer = await agent.request(f"session/{step.op}", {"sessionId": sid, "cwd": str(run.workspace),
                                                             "mcpServers": []})
    elif step.op == "close":
        answer = await agent.request("session/close", {"sessionId": sid})
    else:  # restart
        await agent.stop()
        agent = AgentProcess(run, agent.command, agent.env)
        await agent.start(tg)
        return agent
    if "error" in answer:
        raise ScenarioError(f"answered with an error: {answer['error']}")
    return agent


def agent_env(base: Mapping[str, str], scenario: Scenario, *, offline: bool) -> dict[str, str]:
    """The agent's environment: ours, without the provider's key and endpoint when
    offline (a check must not reach a model), plus the scenario's own."""
    env = {k: v for k, v in base.items() if not (offline and k.startswith("OPENAI_"))}
    env.pop("ACP_BRIDGE_MODEL", None)
    env.pop(REPLAY_MODELS_ENV, None)
    env.update(scenario.env, PYTHONUNBUFFERED="1")
    if offline:
        env["ACP_BRIDGE_REPLAY_CHECK"] = scenario.check
        if scenario.model:  # the replay is offered as the models recorded, with their flags
            env[REPLAY_MODELS_ENV] = " ".join(scenario.model)
    return env

