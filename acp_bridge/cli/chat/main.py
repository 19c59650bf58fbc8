"""`acp-bridge chat`: a terminal ACP client that launches `acp-bridge serve` (or, with
`--wrap -- COMMAND [ARGS...]`, `acp-bridge wrap -- COMMAND [ARGS...]`: any ACP agent,
recorded by the wrapper) and talks to it over the child's stdin/stdout.

It advertises `fs` and `terminal` and serves them itself, so the agent's tools read and
write files and run commands through it; permission requests are asked at the keyboard.

Input: at a terminal (stdin and stdout both terminals) a line editor (editor.py,
prompt_toolkit: cursor keys, history, multi-line prompts, pastes of any length);
otherwise one `LineInput` over stdin (fd 0). Either is the only reader, and every line
is taken by whoever is waiting for one. While a prompt runs the loop waits for its answer and
reads nothing, so a permission question takes the next line: with piped stdin,
prompts and permission answers come from the same stream, in order. A read that is
cancelled (Ctrl-C, or the agent withdrawing its question) loses nothing. The file
descriptor is polled, never switched to non-blocking (a terminal shares that flag with
stdout), and read directly when it cannot be polled (a regular file, /dev/null).

Ctrl-C while a prompt runs sends `session/cancel` (and withdraws a pending permission
question); a second one, or one while idle, quits (in the editor, a Ctrl-C on a line
with text clears the line instead). Quitting closes the agent's stdin
and waits for it to exit. The agent runs in its own session, so the terminal's Ctrl-C
reaches only this process.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from acp_bridge import __version__
from acp_bridge.cli.chat.command_line import agent_command, agent_env, split_wrapped, wrap_problem
from acp_bridge.cli.chat.command_line import options as add_options
from acp_bridge.cli.chat.commands import SlashCommands, error_message
from acp_bridge.cli.chat.render import DIM, RESET, Renderer
from acp_bridge.cli.chat.stdio import LineInput, relay_stderr
from acp_bridge.cli.safe_text import clean, guarded
from acp_bridge.cli.startup import agent_settings
from acp_bridge.cli.wrap_options import cancel_grace
from acp_bridge.client.connection import AgentConnection
from acp_bridge.client.methods import ClientMethods
from acp_bridge.errors import AgentGone
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.host.params import check_client_params
from acp_bridge.rpc.protocol import ClientError

if TYPE_CHECKING:
    from acp_bridge.cli.chat.editor import LineEditor

CLIENT_CAPABILITIES: dict[str, Any] = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}
AGENT_EXIT_WAIT = 10.0  # seconds the agent gets to exit after its stdin closes
# What a person may type to a permission question, and the option kind it picks.
ANSWERS = {"a": "allow_once", "allow": "allow_once", "y": "allow_once", "yes": "allow_once",
           "l": "allow_always", "always": "allow_always",
           "r": "reject_once", "reject": "reject_once", "n": "reject_once", "no": "reject_once"}
CANCELLED: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}
# --- command line -------------------------------------------------------------------


def editor_wanted() -> bool:
    """The line editor is for a person at a terminal: stdin and stdout both terminals
    (not TERM=dumb). Checked here, so prompt_toolkit is imported only when it is used."""
    return os.isatty(0) and os.isatty(1) and os.environ.get("TERM", "") != "dumb"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="acp-bridge chat", usage="%(prog)s [options] [--wrap -- COMMAND [ARGS...]]",
        description="A terminal ACP client for acp-bridge.")
    add_options(parser)
    # Split by hand at the first `--`: the wrapped command's own options (`-m`, `--model`)
    # must never be read as the chat's, and argparse's handling of `--` before a
    # REMAINDER positional differs between Python versions.
    own, wrapped = split_wrapped(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(own)
    args.wrapped = wrapped
    problem = wrap_problem(args)
    if problem:
        parser.error(problem)
    # The agent's values, checked as `serve` (or `wrap`) would check them, before it is
    # started: a bad one is one line and exit status 2 here (acp_bridge.cli.main).
    agent_settings(args, model=not args.wrap)
    if args.wrap:
        cancel_grace(args)
    return run(args)


def option_for(kind: str, options: list[Any]) -> str | None:
    """The optionId the agent offered for an answer of `kind`."""
    wanted = [kind, "reject_always"] if kind == "reject_once" else [kind]
    for want in wanted:
        for option in options:
            if isinstance(option, dict) and option.get("kind") == want and isinstance(option.get("optionId"), str):
                return str(option["optionId"])
    return None


def run(args: argparse.Namespace) -> int:
    for stream in (sys.stdout, sys.stderr):  # an odd terminal encoding must not end the chat
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")
    # The connection logs a handler's failure (answered to the agent as an error); the
    # terminal is the person's: no log reaches it.
    logging.getLogger("acp_bridge").addHandler(logging.NullHandler())
    try:
        return anyio.run(_chat, args)
    except KeyboardInterrupt:
        return 130


async def _chat(args: argparse.Namespace) -> int:
    return await Chat(args).main()


class Chat(SlashCommands):
    """One chat: the agent process, the connection, the input loop, Ctrl-C."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cwd = str(Path(args.cwd).resolve())
        self.input = LineInput(sys.stdin.fileno())
        self.echo = not os.isatty(sys.stdin.fileno())
        # The line editor at a terminal, made when the first line is read (the agent has
        # created the store folder by then: the history lives in it).
        self.editing = editor_wanted()
        self._editor: LineEditor | None = None
        color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        self.render = Renderer(color=color, cwd=self.cwd)
        self.sid: str | None = None
        self.mode: str | None = None
        self.modes: list[str] = []
        self.options: list[Any] = []  # the session's configOptions, as the agent last sent them
        self._conn: AgentConnection | None = None
        self._scope = anyio.CancelScope()  # the input loop: cancelled to quit
        self._prompting = False
        self._cancel_sent = False
        self._questions: set[anyio.CancelScope] = set()
        self._closing = False
        self._lost = False  # the agent went away on its own

    # --- output ----------------------------------------------------------------------

    def write(self, text: str) -> None:
        """Everything the chat prints goes here, and is guarded: any control character
        left in it (from the agent, a tool, a log) is shown escaped; only the chat's own
        styling passes (the renderer cleans what it formats; this is the backstop)."""
        if not text:
            return
        shown = guarded(text, (DIM, RESET))
        if self._editor is not None and self._editor.write_above(shown):
            self.render.open = False  # written on lines of its own, above the line being read
            return
        sys.stdout.write(shown)
        sys.stdout.flush()

    def _stderr_above(self, text: str) -> bool:
        """The agent's stderr while the editor reads: above its line, if stderr is the
        terminal too (else it goes to stderr as always)."""
        return self._editor is not None and os.isatty(2) and self._editor.write_above(text, sys.stderr)

    def error(self, text: str) -> None:
        self.write(self.render.newline())
        print(f"acp-bridge chat: {clean(text)}", file=sys.stderr, flush=True)

    def conn(self) -> AgentConnection:
        assert self._conn is not None
        return self._conn

    # --- lifetime --------------------------------------------------------------------

    async def main(self) -> int:
        if not Path(self.cwd).is_dir():
            self.error(f"--cwd {self.cwd} is not a directory")
            return 2
        try:
            process = await anyio.open_process(agent_command(self.args), stdin=subprocess.PIPE, env=agent_env(self.args),
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                               start_new_session=True)
        except OSError as exc:
            self.error(f"cannot start the agent: {exc}")
            return 1
        code = 1
        async with anyio.create_task_group() as tg:
            methods = ClientMethods(tg, self._permission, check=check_client_params)
            self._conn = conn = AgentConnection(process, methods.serve, error_for=to_rpc_error,
                                                inline={"session/update": self._on_update})
            tg.start_soon(conn.run)
            tg.start_soon(self._watch)
            tg.start_soon(relay_stderr, process, self._stderr_above)
            if threading.current_thread() is threading.main_thread():
                tg.start_soon(self._signals)
            try:
                with self._scope:
                    code = await self._session()
                if self._scope.cancelled_caught:
                    code = 1 if self._lost else 130
            except AgentGone:
                self._lost = True
            finally:
                with anyio.CancelScope(shield=True):
                    self._closing = True
                    await conn.stop(AGENT_EXIT_WAIT)
                    if self._editor is not None:  # the last prompts, if the agent made the store since
                        self._editor.history.keep()
                    await methods.terminals.close_all()
                    await process.aclose()
                tg.cancel_scope.cancel()
        if self._lost:
            self.error(f"the agent exited unexpectedly (exit code {process.returncode})")
            return 1
        return code

    async def _watch(self) -> None:
        await self.conn().gone.wait()
        if not self._closing:
            self._lost = True
            self._scope.cancel()

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                await self._ctrl_c()

    async def _ctrl_c(self) -> None:
        """Ctrl-C (SIGINT, or the key in the editor): cancel the running prompt, or quit."""
        if self._prompting and not self._cancel_sent:
            self._cancel_sent = True
            self.write(self.render.line("[cancelling: Ctrl-C again quits]"))
            self.conn().notify("session/cancel", {"sessionId": self.sid})
            for scope in list(self._questions):
                scope.cancel()
        else:
            self.write(self.render.newline())
            # Quitting closes the agent's stdin, so a prompt still running ends as
            # interrupted by that: the wait for its answer, cancelled below, is not
            # also a `$/cancel_request` (nothing sent after this reaches the agent).
            self.conn().close_output()
            self._scope.cancel()

    async def _ask(self, prompt: str, *, question: bool = False) -> str | None:
        """The next line after showing `prompt` (the renderer's text: the end of an open
        line, then the prompt itself), or None at end of input. In the editor, Ctrl-C
        raises KeyboardInterrupt."""
        if not self.editing:
            self.write(prompt)
            line = await self.input.readline()
            if line is not None:
                self.write(self.render.typed(line, echo=self.echo))
            return line
        if self._editor is None:
            from acp_bridge.cli.chat.editor import LineEditor, history_for
            from session import default_store_dir

            store = Path(self.args.store) if self.args.store else default_store_dir()
            self._editor = LineEditor(history_for(store))
        lead, cut, message = prompt.rpartition("\n")
        self.write(lead + cut)
        self.render.open = False  # the editor's line: what arrives meanwhile is written above it
        try:
            return await self._editor.readline(message, question=question)
        finally:
            self.render.line_closed()

    # --- the conversation ------------------------------------------------------------

    async def _session(self) -> int:
        conn = self.conn()
        try:
            await conn.request("initialize", {
                "protocolVersion": 1, "clientCapabilities": CLIENT_CAPABILITIES,
                "clientInfo": {"name": "acp-bridge-chat", "title": "acp-bridge chat", "version": __version__}})
            if self.args.load and not await self.load(self.args.load):
                return 1
        except ClientError as exc:
            self.error(error_message(exc))
            return 1
        if self.sid is not None:
            mode = f" (mode {self.mode})" if self.mode else ""  # a wrapped agent may have no modes
            self.write(self.render.line(f"session {self.sid}{mode}; /help for commands"))
        else:
            # Made when something needs it (SlashCommands.session): a chat that goes on
            # with /load, or ends before a prompt, leaves no empty session in the store.
            self.write(self.render.line("a new session starts with your first prompt (or /load ID to go "
                                        "on with one); /help for commands"))
        while True:
            try:
                line = await self._ask(self.render.input_prompt())
            except KeyboardInterrupt:  # Ctrl-C on an empty line in the editor: quit
                return 130
            if line is None:
                self.write(self.render.newline())
                return 0
            text = line.strip()
            if not text:
                continue
            if text.startswith("/") and not text.startswith("//"):
                if not await self.command(text):
                    return 0
                continue
            await self._prompt(text[1:] if text.startswith("//") else text)

    async def _prompt(self, text: str) -> None:
        try:
            sid = await self.session()
        except ClientError as exc:
            self.error(error_message(exc))
            return
        self._prompting, self._cancel_sent = True, False
        try:
            result = await self.conn().request(
                "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
        except ClientError as exc:
            self.write(self.render.failed(error_message(exc)))
            return
        finally:
            self._prompting = False
        self.write(self.render.answer(result))

    # --- what the agent sends --------------------------------------------------------

    def _on_update(self, params: Any) -> None:
        """A `session/update`, shown as it is read (before the answer read after it)."""
        if isinstance(params, dict) and isinstance(params.get("update"), dict):
            self.write(self.render.update(params["update"]))

    async def _permission(self, toolCall: dict[str, Any], options: list[Any], **_: Any) -> dict[str, Any]:
        if self._cancel_sent:  # the turn is being cancelled: no more questions
            return CANCELLED
        prompt = self.render.permission(toolCall, options)
        answer: str | None = None
        try:
            with anyio.CancelScope() as scope:
                self._questions.add(scope)
                try:
                    while answer is None:
                        try:
                            line = await self._ask(prompt, question=True)
                        except KeyboardInterrupt:  # the key, in the editor: as SIGINT
                            await self._ctrl_c()
                            break
                        if line is None:
                            self.write(self.render.line("  (end of input: rejected)"))
                            answer = "reject_once"
                        else:
                            answer = ANSWERS.get(line.strip().lower())
                            if answer is None:  # asked again (rendering it marks the line open)
                                prompt = self.render.choices()
                finally:
                    self._questions.discard(scope)
        except anyio.get_cancelled_exc_class():
            self.write(self.render.line("  (the agent withdrew the question)"))
            raise
        if scope.cancelled_caught or answer is None or self._cancel_sent:
            self.write(self.render.line("  (cancelled)"))
            return CANCELLED
        option = option_for(answer, options)
        if option is None:
            return CANCELLED
        return {"outcome": {"outcome": "selected", "optionId": option}}
