"""The chat's `/commands` (`/help`, `/sessions`, `/mode`, `/model`, `/load`, `/fork`) and the
session state they read and change (the current session, its mode and config options).

A part of `main.Chat` (a base class: `Chat` gives it the connection and the output,
`write`, `error`, `conn`), kept apart so that main.py holds the chat's lifetime, input
and Ctrl-C, and this module what a person can ask for by name.
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson

from acp_bridge.cli.chat.render import Renderer, sessions_table
from acp_bridge.cli.safe_text import clean
from acp_bridge.client.connection import AgentConnection
from acp_bridge.rpc.protocol import ClientError

# `_meta.acpBridge.wrapped.restored` of a wrapped load (docs/wrap.md, Load), as shown.
RESTORED = {"load": "its own session loaded", "resume": "its own session resumed",
            "fresh": "a fresh session (it could not restore its own; the replay above is ours)"}
HELP = """commands:
  /sessions      list the stored sessions
  /load ID       load a session (its history is replayed)
  /fork [TURN]   fork the session (up to turn TURN) and go on in the fork
  /mode NAME     set the session mode (ask, accept_edits, read_only)
  /model [NAME]  show the models, or switch the session's model (the next prompt uses it)
  /quit          leave (so does end of input)
anything else is sent as a prompt ("//text" sends "/text").
Ctrl-C cancels a running prompt; a second Ctrl-C (or one while idle) quits.
"""
EDITOR_HELP = """keys: Left/Right/Home/End move, Up/Down and Ctrl-R search earlier prompts,
  Alt-Enter (or Esc Enter) starts a new line, Enter sends; pastes arrive whole;
  Ctrl-C clears the line (on an empty line: quits), Ctrl-D on an empty line quits.
"""


NO_SESSION = ("no session yet: your first prompt starts one (/mode NAME or /model NAME starts it "
              "with that setting; /load ID goes on with a stored one)")


def error_message(exc: ClientError) -> str:
    """What the agent said in its error answer, as the chat shows it."""
    return str(exc.error.get("message", "error"))


class SlashCommands:
    """The /commands of `main.Chat` and the session state they keep."""

    render: Renderer
    editing: bool
    cwd: str
    sid: str | None
    mode: str | None
    modes: list[str]
    options: list[Any]  # the session's configOptions, as the agent last sent them

    def write(self, text: str) -> None:
        raise NotImplementedError  # main.Chat

    def error(self, text: str) -> None:
        raise NotImplementedError  # main.Chat

    def conn(self) -> AgentConnection:
        raise NotImplementedError  # main.Chat

    async def session(self) -> str:
        """The current session, made now if there is none yet (`session/new`): the
        first prompt, or the first /mode NAME or /model NAME, makes it."""
        if self.sid is None:
            result = await self.conn().request("session/new", {"cwd": self.cwd, "mcpServers": []})
            self.enter(str(result["sessionId"]), result)
            mode = f" (mode {self.mode})" if self.mode else ""
            self.write(self.render.line(f"[new session {self.sid}{mode}]"))
        assert self.sid is not None
        return self.sid

    def enter(self, sid: str, state: Any) -> None:
        """Make `sid` the current session, with the mode state of its answer."""
        self.sid = sid
        self.render.new_session()
        options = state.get("configOptions") if isinstance(state, dict) else None
        self.options = options if isinstance(options, list) else []
        modes = state.get("modes") if isinstance(state, dict) else None
        if isinstance(modes, dict):
            self.mode = modes.get("currentModeId")
            self.modes = [m["id"] for m in modes.get("availableModes", []) if isinstance(m, dict) and "id" in m]
        else:  # an agent without modes (a wrapped one may have none)
            self.mode, self.modes = None, []

    async def command(self, text: str) -> bool:
        """Run a /command; False to quit."""
        name, _, arg = text.partition(" ")
        arg = arg.strip()
        conn = self.conn()
        try:
            if name in ("/quit", "/exit"):
                return False
            if name == "/help":
                self.write(self.render.newline() + HELP + (EDITOR_HELP if self.editing else ""))
            elif name == "/sessions":
                result = await conn.request("session/list", {})
                self.write(self.render.newline() + sessions_table(result.get("sessions", []), self.sid))
                if result.get("nextCursor"):
                    self.write("(more sessions not shown)\n")
            elif name == "/mode" and self.sid is None and not arg:
                self.write(self.render.line(NO_SESSION))
            elif name == "/mode" and self.sid is not None and not self.modes:
                # A wrapped agent may offer none: said, rather than a blank or an error.
                self.write(self.render.line("this agent offers no session modes"))
            elif name == "/mode" and not arg:
                self.write(self.render.line(f"mode {self.mode} (available: {', '.join(self.modes)})"))
            elif name == "/mode":
                sid = await self.session()
                if not self.modes:
                    self.write(self.render.line("this agent offers no session modes"))
                else:
                    await conn.request("session/set_mode", {"sessionId": sid, "modeId": arg})
                    self.mode = arg
            elif name == "/model":
                await self.choose_model(arg)
            elif name == "/load" and arg:
                await self.load(arg)
            elif name == "/fork" and (not arg or arg.isdigit()):
                await self.fork(int(arg) if arg else None)
            else:
                usage = {"/load": "usage: /load ID", "/fork": "usage: /fork [TURN]"}
                self.error(usage.get(name) or f"unknown command {text!r}\n{HELP}")
        except ClientError as exc:
            self.error(error_message(exc))
        return True

    async def choose_model(self, arg: str) -> None:
        """`/model`: list the models of the `model` config option; `/model NAME`: switch
        to the one whose value or name is NAME."""
        if self.sid is None and not arg:
            self.write(self.render.line(NO_SESSION))
            return
        if arg:
            await self.session()
        option = next((o for o in self.options if isinstance(o, dict) and o.get("id") == "model"), None)
        if option is None:
            self.error("this agent offers no model choice")
            return
        choices = [c for c in option.get("options", []) if isinstance(c, dict)]
        if not arg:
            lines = [f"{'*' if c.get('value') == option.get('currentValue') else ' '} {c.get('value')}"
                     f"{'  (' + str(c['description']) + ')' if c.get('description') else ''}" for c in choices]
            self.write("".join(self.render.line(text) for text in ["models (* current):", *lines]))
            return
        match = [c for c in choices if arg in (c.get("value"), c.get("name"))]
        value = match[0].get("value") if len(match) == 1 else arg  # unknown: the agent says which exist
        result = await self.conn().request("session/set_config_option",
                                           {"sessionId": self.sid, "configId": "model", "value": value})
        if isinstance(result, dict) and isinstance(result.get("configOptions"), list):
            self.options = result["configOptions"]
        self.write(self.render.line(f"model {value}"))

    async def resolve(self, given: str) -> str | None:
        """`given` as a session id: a full one, or a unique prefix of the ids the agent
        lists (`session/list`, every page), by the one rule of `sessions show`
        (acp_bridge.cli.sessions.source.match_prefix); None, said, if it names none."""
        from acp_bridge.cli.sessions.source import match_prefix
        from acp_bridge.errors import AmbiguousIdError
        from session import SessionError, SessionNotFoundError

        try:
            try:
                return match_prefix(given, ())  # a full id, or refused without a listing
            except SessionNotFoundError:
                pass
            ids: list[str] = []
            cursor: Any = None
            while True:
                page = await self.conn().request("session/list", {} if cursor is None else {"cursor": cursor})
                ids += [str(item["sessionId"]) for item in page.get("sessions", [])
                        if isinstance(item, dict) and isinstance(item.get("sessionId"), str)]
                cursor = page.get("nextCursor")
                if not isinstance(cursor, str) or not cursor:
                    break
            return match_prefix(given, ids)
        except (SessionError, AmbiguousIdError) as exc:
            self.error(f"cannot load {clean(given)!r}: {clean(str(exc))}")
            return None

    async def load(self, given: str) -> bool:
        sid = await self.resolve(given)
        if sid is None:
            return False
        previous = self.sid
        self.render.new_session()
        self.write(self.render.line(f"[loading session {sid}]"))
        try:
            result = await self.conn().request("session/load", {"sessionId": sid, "cwd": self.cwd, "mcpServers": []})
        except ClientError as exc:
            self.error(f"cannot load session {sid}: {error_message(exc)}")
            return False
        self.enter(sid, result)
        meta = (result.get("_meta") or {}).get("acpBridge") or {}
        mode = f", mode {self.mode}" if self.mode else ""
        self.write(self.render.line(f"[loaded session {sid}: {meta.get('turns', '?')} turns{mode}]"))
        self.tell_opened(meta)
        if previous is not None and previous != sid:
            with contextlib.suppress(ClientError):
                await self.conn().request("session/close", {"sessionId": previous})
        return True

    async def fork(self, turn: int | None) -> None:
        """`/fork [TURN]`: the session forked (docs/protocol.md, "Fork"), up to `turn`
        (default: its last), and the chat goes on in the fork; the original is closed
        here, as `/load` closes the session it leaves, and stays in the store."""
        previous = self.sid
        params: dict[str, Any] = {"sessionId": previous, "cwd": self.cwd, "mcpServers": []}
        if turn is not None:
            params["_meta"] = {"acpBridge": {"atTurn": turn}}
        result = await self.conn().request("session/fork", params)
        sid = str(result.get("sessionId"))
        self.enter(sid, result)
        meta = (result.get("_meta") or {}).get("acpBridge") or {}
        at = (meta.get("forkedFrom") or {}).get("turn", "?")
        self.write(self.render.line(f"[forked session {previous} at turn {clean(str(at))}: now in session "
                                    f"{clean(sid)}]"))
        self.tell_opened(meta)
        with contextlib.suppress(ClientError):
            await self.conn().request("session/close", {"sessionId": previous})

    def tell_opened(self, meta: dict[str, Any]) -> None:
        """What a load or a fork answer says the wrapper and the log did."""
        wrapped = meta.get("wrapped") or {}
        restored = wrapped.get("restored")
        if restored:  # how the wrapper brought the wrapped agent's own context back
            self.write(self.render.line(f"[the wrapped agent: {RESTORED.get(restored, restored)}]"))
        if wrapped.get("forked") == "emulated":  # docs/wrap.md, "Fork"
            self.write(self.render.line("[the wrapped agent cannot fork it: a fresh session of it]"))
        if wrapped.get("seeded") is True:  # chat --wrap --seed-fresh, or an emulated fork (docs/wrap.md)
            self.write(self.render.line(f"[the wrapped agent was sent the conversation so far: "
                                        f"{clean(str(wrapped.get('seedTurns', '?')))} turns]"))
        elif isinstance(wrapped.get("seedError"), str):
            self.write(self.render.line(f"[the wrapped agent could not be sent the conversation: "
                                        f"{clean(wrapped['seedError'])}]"))
        repair = meta.get("repair") or {}
        if repair.get("repaired"):
            self.write(self.render.line(f"[the log was repaired: {orjson.dumps(repair).decode()}]"))
