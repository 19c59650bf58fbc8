"""`acp-bridge sessions` and `acp-bridge chat --wrap` on sessions recorded by
`acp-bridge wrap` (issue 14, item 6).

Two sources of wrapped sessions, on both file backends:
- logs written through `session.SessionStore` with a header carrying `wrapped` (fast,
  in-process: the naming rules, the control characters, updates between turns);
- the real thing: `acp-bridge chat --wrap -- python -m acp_bridge serve --model script:...`,
  the chat, the wrapper and our own agent as three processes, compared line for line
  with the same chat talking to the same agent directly (the wrapper must be invisible),
  then loaded again through the wrapper, and read back with `sessions list/show/export`.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from acp_bridge import __version__
from session import SessionStore, open_backend
from session.events import WrappedInfo
from tests.support.acp_client import WRITE_STEP, write_script
from tests.support.logs import Script, write
from tests.test_chat import chat_env, run_chat
from tests.test_sessions_cli import cli

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@pytest.fixture(scope="module", params=["jsonl", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def store_args(root: Path, kind: str) -> list[str]:
    return ["--store", str(root), "--backend", kind]


# --- logs written with SessionStore ------------------------------------------------------


def write_wrapped(root: Path, kind: str, wrapped: WrappedInfo, script: Script) -> str:
    backend = open_backend(kind, root)
    try:
        log = SessionStore(backend).create(cwd="/w", wrapped=wrapped)
        write(log, script)
        log.close()
    finally:
        backend.close()
    return log.id


COMMANDS_UPDATE = {"sessionUpdate": "available_commands_update",
                   "availableCommands": [{"name": "status", "description": "Show diagnostics"}]}
PLAN_UPDATE = {"sessionUpdate": "plan",
               "entries": [{"content": "echo", "priority": "high", "status": "completed"}]}
FAST_AGENT = WrappedInfo(command=["/opt/fa/bin/fast-agent", "--no-update-check", "acp", "--model", "pass through"],
                         sessionId="2611301443-s0wfoX",
                         agentInfo={"name": "fast-agent-acp", "version": "0.10.48"})


def wrapped_script() -> Script:
    """Updates before the first turn (commands, as right after session/new), inside a
    turn and between turns, around two text turns."""
    script = Script().add("wrapped/update", {"update": COMMANDS_UPDATE})
    script.start_turn("hello there").add("wrapped/update", {"turn": 1, "update": PLAN_UPDATE})
    script.start_step().chunk("hello there").message("hello there", usage=False).end_step().end_turn()
    script.add("wrapped/update", {"update": {"sessionUpdate": "session_info_update", "title": "hi"}})
    return script.text_turn("second one", "second one")


def test_show_and_export_name_the_wrapped_agent(tmp_path: Path, kind: str) -> None:
    sid = write_wrapped(tmp_path, kind, FAST_AGENT, wrapped_script())
    show = cli(*store_args(tmp_path, kind), "show", sid)
    assert show.code == 0, show.err
    header = show.out.split("\n\n", 1)[0].splitlines()
    command = "/opt/fa/bin/fast-agent --no-update-check acp --model 'pass through'"  # as a shell reads it
    assert header[1:4] == ["  title    hello there", "  cwd      /w",
                           "  agent    fast-agent-acp 0.10.48, wrapped (its session 2611301443-s0wfoX)"]
    assert header[4] == f"  command  {command}"
    # The updates recorded beside the turns change nothing in them.
    assert "  turns    2 (last: completed)" in show.lines  # after the turns (show streams them)
    assert "Turn 1 — completed" in show.out and "Turn 2 — completed" in show.out
    assert show.out.count("    Assistant:\n      hello there\n") == 1

    md = cli(*store_args(tmp_path, kind), "export", sid)
    assert md.code == 0, md.err
    assert ("- **agent**: fast-agent-acp 0.10.48, wrapped (its session `2611301443-s0wfoX`)\n"
            f"- **command**: `{command}`\n") in md.out

    raw = cli(*store_args(tmp_path, kind), "export", sid, "--format", "jsonl")
    assert orjson.loads(raw.raw.split(b"\n", 1)[0])["wrapped"] == FAST_AGENT


def test_list_counts_turns_of_a_wrapped_session(tmp_path: Path, kind: str) -> None:
    sid = write_wrapped(tmp_path, kind, FAST_AGENT, wrapped_script())
    # A session whose agent sent its commands but was never prompted: no turns, not -1.
    fresh = write_wrapped(tmp_path, kind, WrappedInfo(command=["agent"]),
                          Script().add("wrapped/update", {"update": COMMANDS_UPDATE}))
    listed = cli(*store_args(tmp_path, kind), "list", "--json")
    assert listed.code == 0, listed.err
    rows = {row["id"]: row for row in orjson.loads(listed.out)}
    assert rows[sid]["wrapped"] == FAST_AGENT
    assert (rows[sid]["turns"], rows[sid]["status"]) == (2, "completed")
    assert rows[fresh]["wrapped"] == {"command": ["agent"]}
    assert (rows[fresh]["turns"], rows[fresh]["status"]) == (0, None)
    table = cli(*store_args(tmp_path, kind), "list").lines
    assert [line.split()[3:6] for line in table if line.startswith(fresh)] == [["0", "no", "turns"]]
    assert cli(*store_args(tmp_path, kind), "show", fresh).out.endswith("\nNo turns yet.\n\nTotal tokens: 0 in / 0 out\n")


@pytest.mark.parametrize(("wrapped", "shown"), [
    # No agentInfo: named after its command's file.
    (WrappedInfo(command=["/usr/bin/npx", "@zed-industries/claude-code-acp"]), "npx, wrapped"),
    # A name without a version; no session id of its own recorded (yet).
    (WrappedInfo(command=["x"], agentInfo={"name": "codex-acp"}), "codex-acp, wrapped"),
    # What the wrapped agent says is shown escaped, never sent to the terminal as is.
    (WrappedInfo(command=["x"], agentInfo={"name": "evil\x1b[2J", "version": "1\n2"}),
     "evil\\x1b[2J 1 2, wrapped"),
])
def test_naming_rules(tmp_path: Path, wrapped: WrappedInfo, shown: str) -> None:
    sid = write_wrapped(tmp_path, "jsonl", wrapped, Script().text_turn())
    out = cli(*store_args(tmp_path, "jsonl"), "show", sid).out
    assert f"  agent    {shown}\n" in out
    assert "\x1b" not in out


def test_a_session_of_our_own_agent_names_none(tmp_path: Path) -> None:
    backend = open_backend("jsonl", tmp_path)
    log = SessionStore(backend).create(cwd="/w")
    write(log, Script().text_turn())
    log.close()
    backend.close()
    out = cli(*store_args(tmp_path, "jsonl"), "show", log.id).out
    assert "  agent " not in out and "  command " not in out
    assert "wrapped" not in orjson.loads(cli(*store_args(tmp_path, "jsonl"), "list", "--json").out)[0]


# --- the real thing: chat --wrap around our own agent -------------------------------------


class Chats:
    """The same chat run twice against the same scripted agent: directly (`chat --model`)
    and through the wrapper (`chat --wrap -- python -m acp_bridge serve --model`)."""

    LINES = ("hello", "write it", "a", "/sessions", "/quit")

    def __init__(self, root: Path, kind: str) -> None:
        self.root, self.kind = root, kind
        self.store, self.inner = root / "store", root / "inner"  # the wrapper's, the agent's own
        steps = ({"thinking": "Let me think.", "text": "Hello there."},
                 WRITE_STEP,
                 {"text": "Written."})
        self.model = write_script(root / "script.json", *steps)
        self.direct = self.run("direct", ["--model", self.model])
        self.agent = [sys.executable, "-m", "acp_bridge", "serve", "--store", str(self.inner),
                      "--model", self.model]
        self.wrapped = self.run("wrapped", ["--wrap", "--", *self.agent])
        match = re.search(r"session ([0-9a-f-]{36}) \(mode ask\)", self.wrapped[1])
        assert match, self.wrapped
        self.sid = match.group(1)

    def work(self, name: str) -> Path:
        return self.root / f"work-{name}"

    def run(self, name: str, args: list[str], lines: tuple[str, ...] = LINES) -> tuple[int, str, str]:
        self.work(name).mkdir(exist_ok=True)
        store = self.root / "direct-store" if name == "direct" else self.store
        code, out, err, _ = run_chat(store, self.work(name), list(lines), "--backend", self.kind, *args)
        return code, out, err

    def inner_id(self) -> str:
        listed = cli(*store_args(self.inner, "jsonl"), "list", "--json")  # the agent's own default
        ids = [row["id"] for row in orjson.loads(listed.out)]
        assert len(ids) == 1, listed.out
        return str(ids[0])


@pytest.fixture(scope="module")
def chats(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Chats:
    return Chats(tmp_path_factory.mktemp(f"wrap-chat-{kind}"), kind)


def _before_sessions(out: str) -> str:
    return UUID.sub("<session>", out.split("> /sessions\n", 1)[0])


@pytest.mark.integration
def test_chat_through_the_wrapper_is_the_chat_without_it(chats: Chats) -> None:
    (code, out, err), (direct_code, direct_out, _) = chats.wrapped, chats.direct
    assert code == direct_code == 0, err
    # Streamed thinking and text, a permission asked and granted at the keyboard, the
    # file written through the chat's own fs/write_text_file: line for line the same.
    assert _before_sessions(out) == _before_sessions(direct_out)
    assert "(thinking) Let me think.\nHello there.\n" in out and "Written.\n" in out
    assert (chats.work("wrapped") / "out.txt").read_text() == "hi\n"
    # session/list is the wrapper's: our session id, not the wrapped agent's.
    rows = out.split("> /sessions\n", 1)[1].splitlines()[1:]
    assert [row.split()[1] for row in rows if row.startswith("*")] == [chats.sid]
    assert chats.inner_id() != chats.sid


@pytest.mark.integration
def test_sessions_show_the_wrapped_session(chats: Chats) -> None:
    args = store_args(chats.store, chats.kind)
    show = cli(*args, "show", chats.sid)
    assert show.code == 0, show.err
    assert f"  agent    acp-bridge {__version__}, wrapped (its session {chats.inner_id()})\n" in show.out
    assert f"  command  {shlex.join(chats.agent)}\n" in show.out
    assert "  turns    2 (last: completed)\n" in show.out
    assert "  User:\n    hello\n" in show.out
    assert "    Thinking:\n      | Let me think.\n    Assistant:\n      Hello there.\n" in show.out
    assert "    Assistant:\n      Written.\n" in show.out
    md = cli(*args, "export", chats.sid)
    assert f"- **agent**: acp-bridge {__version__}, wrapped (its session `{chats.inner_id()}`)\n" in md.out
    listed = orjson.loads(cli(*args, "list", "--json").out)
    assert [(row["id"], row["turns"], row["wrapped"]["command"]) for row in listed] == [
        (chats.sid, 2, chats.agent)]


@pytest.mark.integration
def test_chat_wrap_loads_the_wrapped_session(chats: Chats) -> None:
    again = write_script(chats.root / "again.json", {"text": "Back again."})
    agent = [sys.executable, "-m", "acp_bridge", "serve", "--store", str(chats.inner), "--model", again]
    code, out, err = chats.run("wrapped", ["--wrap", "--", *agent], (f"/load {chats.sid}", "again"))
    assert code == 0, err
    replay = out.split(f"[loading session {chats.sid}]\n", 1)[1]
    # Replayed from the wrapper's log, as the chat showed it live: the title the agent
    # sent (a wrapped/update) included, which our own agent's replay does not resend.
    assert replay.startswith("> hello\n[session: hello]\n(thinking) Let me think.\nHello there.\n"
                             "> write it\nWriting.\n⚙ Write out.txt [pending]\n"
                             "  ✓ completed: out.txt +1 -0 (new file)\nWritten.\n")
    assert (f"[loaded session {chats.sid}: 2 turns, mode ask]\n"
            "[the wrapped agent: its own session loaded]\n> again\nBack again.\n") in replay
    assert cli(*store_args(chats.store, chats.kind), "show", chats.sid).out.count("\nTurn ") == 3


@pytest.mark.integration
def test_chat_wrap_seed_fresh_seeds_an_agent_that_cannot_load_the_session(chats: Chats) -> None:
    # The agent runs on a store of its own that has never seen the session: the wrapper
    # gives it a fresh session and, with --seed-fresh, the conversation so far first.
    model = write_script(chats.root / "seeded.json", {"text": "OK"}, {"text": "Seeded and back."})
    agent = [sys.executable, "-m", "acp_bridge", "serve", "--store", str(chats.root / "elsewhere"), "--model", model]
    turns = cli(*store_args(chats.store, chats.kind), "show", chats.sid).out.count("\nTurn ")  # 2 or more
    code, out, err = chats.run("wrapped", ["--wrap", "--seed-fresh", "--", *agent], (f"/load {chats.sid}", "again"))
    assert code == 0, err
    after = out.split(f"[loaded session {chats.sid}: {turns} turns, mode ask]\n", 1)[1]
    assert after.startswith("[the wrapped agent: a fresh session (it could not restore its own; the replay above "
                            f"is ours)]\n[the wrapped agent was sent the conversation so far: {turns} turns]\n"), after
    assert "Seeded and back." in after
    assert cli(*store_args(chats.store, chats.kind), "show", chats.sid).out.count("\nTurn ") == turns + 1
    # Without the flag, the same agent gets no seed.
    code, out, err = chats.run("wrapped", ["--wrap", "--", *agent], (f"/load {chats.sid}",))
    assert code == 0 and "conversation so far" not in out, err


@pytest.mark.integration
def test_chat_wrap_reports_an_agent_that_cannot_start(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "acp_bridge", "chat", "--store", str(tmp_path / "store"), "--cwd",
         str(tmp_path / "work"), "--wrap", "--", str(tmp_path / "no-such-agent")],
        input="hello\n", capture_output=True, text=True, timeout=30, env=chat_env())
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "hello" not in proc.stdout
