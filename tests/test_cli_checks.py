"""The smaller things a new user tripped over (issue 36, point 8): `sessions delete`
(asked, or `--yes`; never under a running agent), `login --remove`, `login` refusing an
endpoint that cannot work before it asks for a key, `-n` checked, and the MCP timeouts
checked at start-up like every other value (one line naming the variable, exit 2)."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from acp_bridge.cli import main as cli
from session import SessionLockedError, SessionStore, open_backend
from tests.support.logs import Script, write


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    for name in list(os.environ):
        if name.startswith(("ACP_BRIDGE_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    yield monkeypatch


def run_cli(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdin", io.StringIO(stdin))
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def make_store(root: Path, backend: str, n: int = 2) -> list[str]:
    store = SessionStore(open_backend(backend, root))
    ids = []
    for i in range(n):
        log = store.create(cwd="/w")
        write(log, Script().text_turn(f"prompt {i}", "answer"))
        ids.append(log.id)
        log.close()
    store.close()
    return ids


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_delete_asks_or_takes_yes(env: pytest.MonkeyPatch, tmp_path: Path, backend: str) -> None:
    store = tmp_path / "store"
    keep, gone = make_store(store, backend)
    # Not at a terminal and no --yes: refused, nothing deleted.
    code, _, err = run_cli("sessions", "delete", gone[:8], "--store", str(store), stdin="y\n")
    assert code == 2 and "without a confirmation: give --yes" in err
    # At a terminal: asked; anything but yes keeps it.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("builtins.input", lambda question: "n")
        code, _, err = run_cli_tty("sessions", "delete", gone, "--store", str(store))
    assert code == 1 and f"kept {gone}" in err
    asked: list[str] = []

    def say_yes(question: str) -> str:
        asked.append(question)
        return "yes"

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("builtins.input", say_yes)
        code, _, err = run_cli_tty("sessions", "delete", gone, "--store", str(store))
    assert code == 0 and f"deleted {gone}" in err
    assert asked and "'prompt 1', 1 turn, updated " in asked[0] and "cannot be undone" in asked[0]
    code, out, _ = run_cli("sessions", "list", "--store", str(store), "--json")
    assert gone not in out and keep in out
    code, _, err = run_cli("sessions", "show", gone, "--store", str(store))
    assert code == 1 and "not found" in err


def run_cli_tty(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    tty = type("Tty", (io.StringIO,), {"isatty": lambda self: True})()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdin", tty)
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_delete_never_pulls_a_session_from_a_running_agent(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    [sid] = make_store(store_dir, "jsonl", 1)
    store = SessionStore(open_backend("jsonl", store_dir))
    opened = store.load(sid)  # an agent has it open: it holds the owner lock
    try:
        code, _, err = run_cli("sessions", "delete", sid, "--yes", "--store", str(store_dir))
        assert (code, err) == (1, f"acp-bridge sessions: session {sid} is open in another owner; "
                                  "close it there first\n")
    finally:
        opened.log.close()
    assert run_cli("sessions", "delete", sid, "--yes", "--store", str(store_dir))[0] == 0
    with pytest.raises(Exception) as gone:
        store.load(sid)
    assert not isinstance(gone.value, SessionLockedError)


def test_login_remove(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key = tmp_path / "config" / "acp-bridge" / "openai-api-key"
    key.parent.mkdir(parents=True)
    key.write_text("sk-stored\n")
    code, out, _ = run_cli("login", "--remove")
    assert code == 0 and out == f"acp-bridge login: key removed from {key}\n"
    assert not key.exists()
    code, out, _ = run_cli("login", "--remove")
    assert code == 0 and out == f"acp-bridge login: no stored key at {key}; nothing to remove\n"


def test_login_refuses_an_endpoint_that_cannot_work(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.setenv("OPENAI_BASE_URL", "ftp://x")
    code, out, err = run_cli("login", stdin="sk-some-key\n")
    assert (code, out) == (1, "")
    assert err == ("acp-bridge login: OPENAI_BASE_URL='ftp://x' must be an http:// or https:// URL, "
                   "e.g. http://localhost:11434/v1; nothing stored\n")
    assert not (tmp_path / "config" / "acp-bridge").exists()


@pytest.mark.parametrize("value", ["0", "-1", "x", "99999999999999999999"])
def test_list_n_is_checked(env: pytest.MonkeyPatch, tmp_path: Path, value: str) -> None:
    make_store(tmp_path / "store", "jsonl", 1)
    code, out, err = run_cli("sessions", "list", "-n", value, "--store", str(tmp_path / "store"))
    assert (code, out) == (2, "")
    assert "argument -n/--limit: " in err and "Traceback" not in err


@pytest.mark.parametrize(("variable", "value", "said"), [
    ("ACP_BRIDGE_MCP_START_TIMEOUT", "soon", "expected a number of seconds, got 'soon'"),
    ("ACP_BRIDGE_MCP_CALL_TIMEOUT", "0", "must be more than 0 and at most 86400 seconds, got 0"),
    ("ACP_BRIDGE_MCP_CALL_TIMEOUT", "nan", "must be more than 0 and at most 86400 seconds, got nan"),
])
def test_mcp_timeouts_are_checked_at_start_up(env: pytest.MonkeyPatch, tmp_path: Path,
                                               variable: str, value: str, said: str) -> None:
    env.setenv(variable, value)
    code, out, err = run_cli("serve", "--store", str(tmp_path / "store"))
    assert (code, out) == (2, "")
    assert err == f"acp-bridge: ${variable}: {said}\n"
    assert not (tmp_path / "store" / "sessions").exists()
