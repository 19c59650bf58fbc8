"""The tool calls of one step (DESIGN.md section 4), for the turn runner.

Each call is planned, decided by the session's mode, written as a durable `tool/call`
before anyone is asked or anything runs (`pending` when it does not run at once: it
asks the client, or it is refused), let run by a durable `tool/permission` when the
client's answer allows it, run, and answered by a `tool/result`. A failure the model
can act on (bad arguments, an unknown tool, a refusal, a permission request that
failed, the tool's own error) is a failed result and the turn goes on; a tool that
breaks (an unexpected exception) fails the step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import orjson

from acp_bridge.errors import ToolError, ToolMachineryError
from acp_bridge.host.updates import SessionUpdate, call_progress
from acp_bridge.models import ToolCallChunk
from acp_bridge.tools import permissions
from acp_bridge.tools.base import (
    ClientServices,
    PermissionOutcome,
    PermissionRequest,
    Terminal,
    Tool,
    ToolContext,
    ToolKind,
    ToolOutcome,
)
from acp_bridge.tools.environment import Secrets
from session import Event, reason
from session.events import PermissionRecord, Reason
from session.items import Item, tool_call, tool_permission, tool_result

ProgressSink = Callable[[SessionUpdate], Awaitable[None]]
"""Where the live-only `tool_call_update`s of a call go (no event records them): a
running tool's interim content."""
Append = Callable[[Item], Awaitable[Event]]
"""Appends one event to the session log (the runner's, which also streams it)."""


class ToolCalls:
    """Runs the tool calls of a session's steps through `append` (the runner's log).

    `mode` reads the session's mode when a call is decided (the client may change it
    while a step runs). `always_allowed` is the runner's set (the rules the user allowed
    always for the session: tools.permissions.Rule), shared, so an "allow always"
    answered here holds for every later step. `cancel` cancels the running turn: a
    cancelled permission request means the user stopped it (the turn ends `cancelled`
    by `session/request_permission`).
    `cancelled` says whether the running turn was cancelled already (a session/cancel,
    a session/close, the agent stopping): a permission answer that comes back after
    that is not acted on (docs/protocol.md, "Cancellation").
    `secrets` gives the secrets the agent holds (agent.auth.held_secrets): a call's
    result and interim content are redacted of them before they are recorded or sent,
    a second line behind the environment the tools' processes are given.
    """

    def __init__(
        self,
        *,
        tools: Sequence[Tool] | None,
        services: ClientServices,
        roots: tuple[Path, ...],
        append: Append,
        mode: Callable[[], str],
        cancel: Callable[[str], bool],
        cancelled: Callable[[], bool],
        always_allowed: set[permissions.Rule],
        on_progress: ProgressSink | None = None,
        secrets: Callable[[], Secrets] | None = None,
    ) -> None:
        self._secrets = secrets or Secrets
        self._tools = {t.name: t for t in tools} if tools is not None else None
        self._specs: list[dict[str, Any]] | None = None  # the same every step: made once
        self._services = services
        self._roots = roots
        self._append = append
        self._mode = mode
        self._cancel = cancel
        self._cancelled = cancelled
        self._always_allowed = always_allowed
        self._on_progress = on_progress

    def set_tools(self, tools: Sequence[Tool] | None) -> None:
        """The tools from the next step on (None: the built-in ones), e.g. with the
        tools of the session's MCP servers."""
        self._tools = {t.name: t for t in tools} if tools is not None else None
        self._specs = None

    def specs(self) -> Sequence[Mapping[str, Any]]:
        """The tools as the model is told of them: {name, description, parameters}."""
        if self._specs is None:
            if self._tools is None:
                from acp_bridge.tools import tool_specs  # the tools load with the first turn

                self._specs = tool_specs()
            else:
                self._specs = [{"name": t.name, "description": t.description, "parameters": t.parameters}
                               for t in self._tools.values() if not getattr(t, "holds_prefix", False)]
        return self._specs

    def _tool(self, name: str) -> Tool | None:
        if self._tools is None:
            from acp_bridge.tools import get_tool

            return get_tool(name)
        tool = self._tools.get(name)
        if tool is None:  # a tool not offered that answers for its name as a prefix
            # (tools/mcp_servers.py: the tools of an MCP server that did not start)
            tool = next((t for t in self._tools.values()
                         if getattr(t, "holds_prefix", False) and name.startswith(t.name)), None)
        return tool

    async def run_all(self, turn: int, step: int, calls: Sequence[ToolCallChunk]) -> Reason | None:
        """Run a step's calls in order. Returns the turn's end reason if a tool broke
        (the calls after it are answered as not run), else None."""
        for index, call in enumerate(calls):
            try:
                await self.run(turn, step, call)
            except ToolMachineryError as exc:
                for later in calls[index + 1 :]:
                    await self.result(turn, step, later.id, ToolOutcome.text(
                        "Not run: an earlier tool call in this step failed.", is_error=True))
                return reason("error", step=step, message=str(exc), code="tool_failed")
        return None

    async def run(self, turn: int, step: int, call: ToolCallChunk) -> None:
        """One call, from its `tool/call` to its `tool/result`. Raises
        ToolMachineryError (after writing the failed result) if the tool broke."""
        elicited: list[Any] = []
        ctx = ToolContext(cwd=self._roots[0], roots=self._roots, services=self._services,
                          progress=self._progress(call.id), elicit=self._elicit(call.id, elicited), elicited=elicited,
                          completed=self._completed(elicited))
        tool = self._tool(call.name)
        arguments: Any = call.arguments
        title, locations, preview = call.name, [], []
        kind: ToolKind = "other"
        problem: ToolError | None = None
        try:
            arguments = orjson.loads(call.arguments or "{}")
            if tool is None:
                raise ToolError(f"there is no tool named {call.name!r}", code="unknown_tool")
            if not isinstance(arguments, dict):
                raise ToolError("tool arguments must be a JSON object", code="invalid_arguments")
            plan = await tool.plan(arguments, ctx)
            title, kind, locations, preview = plan.title, plan.kind, plan.locations, plan.preview
        except orjson.JSONDecodeError as exc:
            problem = ToolError(f"tool arguments are not valid JSON: {exc}", code="invalid_arguments")
        except ToolError as exc:
            problem = exc
            kind = tool.kind if tool is not None else "other"
        rule = permissions.always_rule(call.name, kind, arguments)
        mode = self._mode()
        decision = permissions.decide(mode, kind, rule, self._always_allowed) if problem is None else "deny"
        # Who decided, when nobody is asked: a rule, the mode (shown with the call).
        decided = permissions.unasked(mode, kind, rule, self._always_allowed) if problem is None else None
        # Durable before anyone is asked or anything runs; `pending` unless it runs now.
        await self._append(tool_call(turn, step, call.id, name=call.name, arguments=arguments, title=title,
                                     kind=kind, locations=locations, pending=decision != "allow",
                                     permission=decided))
        if problem is not None or tool is None:
            await self.result(turn, step, call.id, ToolOutcome.failure(problem or ToolError("no tool")))
            return
        permission: PermissionRecord | None = None
        if decision == "deny":
            await self.result(turn, step, call.id, ToolOutcome.failure(ToolError(
                f"{call.name} is not allowed in {mode} mode", code="read_only", name="PermissionDenied")))
            return
        if decision == "ask":
            answer = await self._services.request_permission(PermissionRequest(
                call_id=call.id, title=title, kind=kind, raw_input=arguments, name=call.name,
                locations=locations, content=preview, options=permissions.options_for(rule)))
            if self._cancelled():
                # The turn was cancelled before this answer was acted on (a session/cancel
                # read with it, before or after it): the cancel wins, the answer is not
                # recorded, and the closers answer the call as not run. Raises here.
                await anyio.sleep_forever()
            permission = _record(answer)
            if answer.outcome == "cancelled":
                # This answer ends the turn from now on: a session/cancel read while its
                # result is written changes neither the result nor the turn's `by`.
                self._cancel("session/request_permission")
                with anyio.CancelScope(shield=True):
                    await self.result(turn, step, call.id, ToolOutcome.failure(ToolError(
                        "The permission request was cancelled.", code="cancelled", name="Cancelled")), permission)
                await anyio.sleep_forever()  # the turn's scope is cancelled: raises
            if answer.outcome in ("error", "invalid"):
                # No answer is no permission, but the user refused nothing: say what failed.
                await self.result(turn, step, call.id, ToolOutcome.failure(ToolError(
                    f"The permission request failed: {_failure(answer)}. The tool call did not run.",
                    code="permission_failed", name="PermissionError")), permission)
                return
            if answer.option_id not in (permissions.ALLOW_ONCE, permissions.ALLOW_ALWAYS):
                await self.result(turn, step, call.id, ToolOutcome.failure(ToolError(
                    "The user rejected this tool call.", code="rejected", name="PermissionDenied")), permission)
                return
            # Durable before the tool runs: from here on the call may have run.
            await self._append(tool_permission(turn, step, call.id, permission))
            if answer.option_id == permissions.ALLOW_ALWAYS:
                self._always_allowed.add(rule)
        try:
            outcome = await tool.run(arguments, ctx)
        except ToolError as exc:
            outcome = ToolOutcome.failure(exc)
        except Exception as exc:
            await self.result(turn, step, call.id, ToolOutcome.failure(ToolError(
                f"{call.name} failed: {type(exc).__name__}: {exc}", code="tool_failed",
                name=type(exc).__name__)), permission, elicited)
            raise ToolMachineryError(f"{call.name} failed: {type(exc).__name__}: {exc}") from exc
        await self.result(turn, step, call.id, outcome, permission, elicited)

    def _elicit(self, call_id: str, elicited: list[Any]) -> Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]:
        """The call's way to ask the person (ToolContext.elicit): each request and its
        answer kept for the call's `tool/result`."""
        async def elicit(request: Mapping[str, Any]) -> dict[str, Any]:
            answer = await self._services.elicit(call_id, request)
            elicited.append({"request": dict(request), "answer": answer})
            return answer

        return elicit

    def _completed(self, elicited: list[Any]) -> Callable[[str], None]:
        """The call's URL elicitation `elicitation_id` is complete (ToolContext.completed):
        its entry in the call's `tool/result.elicitations` says `completed: true`, and
        the client is told."""
        def completed(elicitation_id: str) -> None:
            for entry in elicited:
                if entry["request"].get("mode") == "url" and entry["request"].get("elicitationId") == elicitation_id:
                    entry["completed"] = True
            self._services.elicitation_complete(elicitation_id)

        return completed

    def _progress(self, call_id: str) -> Callable[[list[Any]], Awaitable[None]] | None:
        sink = self._on_progress
        if sink is None:
            return None

        async def progress(content: list[Any]) -> None:
            await sink(call_progress(call_id, self._secrets().redact_json(content)))

        return progress

    async def result(self, turn: int, step: int, call_id: str, outcome: ToolOutcome,
                     permission: PermissionRecord | None = None, elicited: list[Any] | None = None) -> None:
        """Write the `tool/result` of a call (with what an MCP server asked the person
        during it, and the answers)."""
        error = outcome.error
        secrets = self._secrets()
        await self._append(tool_result(
            turn, step, call_id, content=secrets.redact_json(outcome.content), is_error=outcome.is_error,
            error=None if error is None else {"name": error["name"], "code": error["code"]},
            display=secrets.redact_json(outcome.display), permission=permission,
            elicitations=secrets.redact_json(elicited) if elicited else elicited))


def _record(answer: PermissionOutcome) -> PermissionRecord:
    """The client's answer as the log records it (`tool/permission`, `tool/result`)."""
    record: PermissionRecord = {"outcome": answer.outcome}
    if answer.option_id is not None:
        record["optionId"] = answer.option_id
    if answer.code is not None:
        record["code"] = answer.code
    if answer.message is not None:
        record["message"] = answer.message
    return record


def _failure(answer: PermissionOutcome) -> str:
    """What went wrong with an answer that is neither an option nor a cancel."""
    if answer.outcome == "error":
        code = f" {answer.code}" if answer.code is not None else ""
        return f"the client answered it with an error{code} ({answer.message or 'no message'})"
    return answer.message or "the client's answer is not one of the options offered"


class DurableFirstServices:
    """ClientServices that make the log durable before every request that leaves the
    agent (DESIGN.md section 3: before a permission request, `fs/*` or `terminal/*`).
    After a `tool/call` there is nothing pending, so this costs nothing there; it
    matters for the file read an edit's diff preview makes before its `tool/call`."""

    def __init__(self, inner: ClientServices, sync: Callable[[], Awaitable[None]]) -> None:
        self._inner = inner
        self._sync = sync

    async def read_text_file(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        await self._sync()
        return await self._inner.read_text_file(path, line, limit)

    async def write_text_file(self, path: Path, content: str) -> None:
        await self._sync()
        await self._inner.write_text_file(path, content)

    async def create_terminal(
        self, command: str, *, cwd: Path, output_byte_limit: int, env: Mapping[str, str] | None = None
    ) -> Terminal:
        await self._sync()
        return await self._inner.create_terminal(command, cwd=cwd, output_byte_limit=output_byte_limit, env=env)

    async def request_permission(self, request: PermissionRequest) -> PermissionOutcome:
        await self._sync()
        return await self._inner.request_permission(request)

    async def elicit(self, call_id: str, request: Mapping[str, Any]) -> dict[str, Any]:
        await self._sync()
        return await self._inner.elicit(call_id, request)

    def elicitation_complete(self, elicitation_id: str) -> None:
        self._inner.elicitation_complete(elicitation_id)
