"""The run_command tool: a shell command through the client's terminal or locally.

The terminal is always released, whatever happens (timeout, cancellation, an error
from the client), in a shielded `finally`; on cancellation it is killed first so the
command does not run on unseen. Output has two audiences: the model gets at most
MODEL_OUTPUT_BYTES (head and tail: the start shows what ran, the end how it finished),
the person gets up to DISPLAY_OUTPUT_BYTES in the tool call's display.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path

import anyio

from acp_bridge.errors import ToolError
from acp_bridge.tools.base import (
    JSON,
    ExitStatus,
    Terminal,
    TerminalOutput,
    ToolContext,
    ToolKind,
    ToolOutcome,
    ToolPlan,
)
from acp_bridge.tools.files import check_arguments
from acp_bridge.tools.paths import resolve_in_roots

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
MODEL_OUTPUT_BYTES = 16 * 1024
DISPLAY_OUTPUT_BYTES = 1024 * 1024
# How long each cleanup request (kill, release) may take on cancellation or shutdown;
# the agent gives its running requests 1.5 s after stdin closes.
CLEANUP_S = 0.5
# After a kill, how long to wait for the exit (and the last output) before reporting.
KILL_GRACE_S = 2.0


def cap_middle(text: str, limit: int) -> str:
    """Keep the first and last `limit/2` bytes of `text`, cut at character boundaries,
    with a marker saying how much was left out."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    half = limit // 2
    head = data[:half].decode("utf-8", "ignore")
    tail = data[-half:].decode("utf-8", "ignore")
    omitted = len(data) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return f"{head}\n[... {omitted} bytes omitted ...]\n{tail}"


def status_line(status: ExitStatus | None) -> str:
    if status is None:
        return "exit status unknown"
    if status.signal:
        return f"killed by signal {status.signal}"
    if status.exit_code is None:
        return "exit status unknown"
    return f"exit code {status.exit_code}"


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s"


class RunCommand:
    name = "run_command"
    kind: ToolKind = "execute"
    description = (
        "Run a shell command (/bin/sh -c) and return its combined stdout/stderr and exit "
        "code; it runs with no input and is killed after `timeout_ms`."
    )
    parameters: Mapping[str, JSON] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The shell command line to run."},
            "cwd": {
                "type": "string",
                "description": "Working directory, relative to the session cwd or absolute inside the session roots (default: the session cwd).",
            },
            "timeout_ms": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT_MS,
                "description": f"Kill the command after this many milliseconds (default {DEFAULT_TIMEOUT_MS}).",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }

    def _prepare(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> tuple[str, Path, int]:
        args = check_arguments(self.name, arguments, self.parameters)
        command: str = args["command"]
        if not command.strip():
            raise ToolError("run_command: 'command' must not be empty", code="invalid_arguments")
        if "\0" in command:
            raise ToolError("run_command: 'command' contains a NUL byte", code="invalid_arguments")
        if "cwd" in args:
            cwd = resolve_in_roots(args["cwd"], ctx, must_exist=True, for_write=False, kind="dir")
        else:
            cwd = Path(ctx.cwd)
        return command, cwd, args.get("timeout_ms", DEFAULT_TIMEOUT_MS)

    async def plan(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolPlan:
        command, _cwd, _timeout = self._prepare(arguments, ctx)
        lines = command.strip().splitlines()
        short = lines[0] if len(lines) == 1 and len(lines[0]) <= 80 else lines[0][:80] + " …"
        return ToolPlan(f"Run {short}", self.kind)

    async def run(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolOutcome:
        command, cwd, timeout_ms = self._prepare(arguments, ctx)
        terminal = await ctx.services.create_terminal(
            command, cwd=cwd, output_byte_limit=DISPLAY_OUTPUT_BYTES
        )
        embed: list[JSON] = []
        if terminal.terminal_id is not None:
            embed = [{"type": "terminal", "terminalId": terminal.terminal_id}]
        try:
            if embed and ctx.progress is not None:
                await ctx.progress(list(embed))
            status: ExitStatus | None = None
            timed_out = False
            try:
                with anyio.fail_after(timeout_ms / 1000):
                    status = await terminal.wait_for_exit()
            except TimeoutError:
                timed_out = True
                await terminal.kill()
                with anyio.move_on_after(KILL_GRACE_S):
                    status = await terminal.wait_for_exit()
            output = await terminal.output()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True) as cleanup, contextlib.suppress(Exception):
                cleanup.deadline = anyio.current_time() + CLEANUP_S
                await terminal.kill()
            raise
        finally:
            # Bounded: a client that never answers terminal/kill or terminal/release
            # must not keep a cancelled turn (or a stopping agent) waiting.
            with anyio.CancelScope(shield=True) as cleanup:
                cleanup.deadline = anyio.current_time() + CLEANUP_S
                await _release(terminal)
        return _outcome(output, status or output.exit_status, timed_out, timeout_ms, embed)


async def _release(terminal: Terminal) -> None:
    try:
        await terminal.release()
    except Exception:
        # Cleanup must not hide the result or the error already on its way.
        log.warning("releasing terminal %s failed", terminal.terminal_id, exc_info=True)


def _outcome(
    output: TerminalOutput,
    status: ExitStatus | None,
    timed_out: bool,
    timeout_ms: int,
    embed: list[JSON],
) -> ToolOutcome:
    full = output.output
    if len(full.encode("utf-8")) > DISPLAY_OUTPUT_BYTES:
        # A client may keep more than asked; show the person the last 1 MiB.
        full = full.encode("utf-8")[-DISPLAY_OUTPUT_BYTES:].decode("utf-8", "ignore")
    note = "[earlier output was dropped: only the last 1 MiB is kept]\n" if output.truncated else ""
    ending = status_line(status)
    model_text = note + cap_middle(full, MODEL_OUTPUT_BYTES)
    if model_text and not model_text.endswith("\n"):
        model_text += "\n"
    display_text = note + full
    if display_text and not display_text.endswith("\n"):
        display_text += "\n"
    display: list[JSON] = [
        *embed,
        {"type": "content", "content": {"type": "text", "text": display_text + ending}},
    ]
    if timed_out:
        head = f"Command timed out after {_seconds(timeout_ms)} and was killed. Output so far:\n"
        return ToolOutcome(
            [{"type": "text", "text": head + model_text + ending}],
            is_error=True,
            display=display,
            error={"name": "TimeoutError", "code": "timeout"},
        )
    failed = status is None or status.exit_code != 0
    return ToolOutcome(
        [{"type": "text", "text": model_text + ending}], is_error=failed, display=display
    )
