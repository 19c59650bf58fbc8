"""Fail fast, in one line (issue 17): every start-up value that can be checked before
serving is checked, by `serve`, `wrap`, `chat`, `sessions` and `demo` alike, whether it
came from a flag or the environment. A bad one is one line on stderr naming the option
and what is wrong, exit status 2, nothing on stdout, no traceback (unless the log level
is debug), and no session in the store.

Every case runs the real command line in a fresh interpreter; the agent's cases are fed
`initialize` and `session/new` on stdin, so an agent that started anyway would answer
them (and store a session).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.support.acp_client import write_script
from tests.support.processes import wait_gone

pytestmark = pytest.mark.integration

ACP_BRIDGE = [sys.executable, "-m", "acp_bridge"]
NEW_SESSION = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}},
    {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}},
]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACP_BRIDGE_", "OPENAI_")) and k != "XDG_STATE_HOME"}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def run(args: list[str], env: dict[str, str], cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ACP_BRIDGE, *args], input=stdin, capture_output=True, text=True, timeout=30,
                          env=env, cwd=cwd)


def stored_sessions(store: Path) -> list[str]:
    """Whatever a backend would have stored under `store` (a file store is a file)."""
    if not store.is_dir():
        return []
    return sorted(str(p.relative_to(store)) for p in store.rglob("*")
                  if p.suffix in (".jsonl", ".sqlite3", ".lock"))


class Paths:
    """The bad values of the cases, made in one tmp folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = root / "store"
        self.file = root / "a-file"
        self.file.write_text("not a folder\n")
        self.missing_script = root / "no-such-script.json"
        self.unknown_field = root / "unknown-field.json"
        write_script(self.unknown_field, {"text": "hi", "sparkle": True})
        self.unknown_top = root / "unknown-top.json"
        self.unknown_top.write_bytes(orjson.dumps({"steps": [{"text": "hi"}], "speed": 3}))
        self.not_json = root / "not-json.json"
        self.not_json.write_text("{steps: [")
        self.folder = root / "a-folder"
        self.folder.mkdir()

    def names(self) -> dict[str, Path]:
        return {"store": self.store, "file": self.file, "missing_script": self.missing_script,
                "unknown_field": self.unknown_field, "unknown_top": self.unknown_top,
                "not_json": self.not_json, "folder": self.folder}

    def fill(self, args: list[str]) -> list[str]:
        return [v.format(**self.names()) for v in args]

    def env(self, values: dict[str, str]) -> dict[str, str]:
        return clean_env(**{k: v.format(**self.names()) for k, v in values.items()})


# (the command line, extra environment, the error line's start, a phrase of its reason)
AGENT_CASES = [
    (["--model", "script:{missing_script}"], {}, "--model: ", "cannot read model script"),
    (["--model", "script:{unknown_field}"], {}, "--model: ", "unknown fields ['sparkle']"),
    (["--model", "script:{unknown_top}"], {}, "--model: ", "unknown fields ['speed']"),
    (["--model", "script:{not_json}"], {}, "--model: ", "is not JSON"),
    (["--model", "script:"], {}, "--model: ", "script:PATH needs the path of a model script"),
    ([], {"ACP_BRIDGE_MODEL": "script:{missing_script}"}, "$ACP_BRIDGE_MODEL: ", "cannot read model script"),
    (["--model", "openai:gpt-4o"], {"OPENAI_BASE_URL": "ftp://x"}, "--model: ",
     "OPENAI_BASE_URL='ftp://x' must be an http:// or https:// URL"),
    (["--model", "openai:gpt-4o"], {"ACP_BRIDGE_CONTEXT_WINDOW": "lots"}, "--model: ",
     "ACP_BRIDGE_CONTEXT_WINDOW='lots' is not a whole number"),
    ([], {"ACP_BRIDGE_BACKEND": "foo"}, "$ACP_BRIDGE_BACKEND: ", "unknown backend 'foo'; use jsonl, sqlite or postgres"),
    ([], {"ACP_BRIDGE_BACKEND": "memory"}, "$ACP_BRIDGE_BACKEND: ", "memory backend keeps nothing on disk"),
    (["--backend", "memory"], {}, "--backend: ", "memory backend keeps nothing on disk"),
    (["--backend", "foo"], {}, "--backend: ", "unknown backend 'foo'"),
    ([], {"ACP_BRIDGE_LOG_LEVEL": "loud"}, "$ACP_BRIDGE_LOG_LEVEL: ", "unknown log level 'loud'"),
    (["--log-level", "loud"], {}, "--log-level: ", "unknown log level 'loud'"),
    (["--log-file", "/nonexistent/x.log"], {}, "--log-file: ",
     "cannot create /nonexistent/x.log: /nonexistent does not exist"),
    (["--log-file", "{folder}"], {}, "--log-file: ", "is a folder"),
    (["--store", "{file}"], {}, "--store: ", "is not a folder"),
    (["--max-steps", "0"], {}, "--max-steps: ", "must be at least 1"),
]
# The wrapper's own: its cancel grace (docs/wrap.md, "The cancel grace").
GRACE_CASES = [
    (["--cancel-grace", "0"], {}, "--cancel-grace: ", "must be more than 0 and at most 600 seconds, got 0"),
    (["--cancel-grace", "soon"], {}, "--cancel-grace: ", "not a number of seconds: 'soon'"),
    (["--cancel-grace", "nan"], {}, "--cancel-grace: ", "must be more than 0"),
    (["--cancel-grace", "601"], {}, "--cancel-grace: ", "at most 600 seconds"),
    ([], {"ACP_BRIDGE_CANCEL_GRACE": "-1"}, "$ACP_BRIDGE_CANCEL_GRACE: ", "must be more than 0"),
]
WRAP_CASES = [case for case in AGENT_CASES if "--model" not in case[0] and "ACP_BRIDGE_MODEL" not in case[1]
              and "--max-steps" not in case[0]] + GRACE_CASES


def check_refused(result: subprocess.CompletedProcess[str], prog: str, start: str, phrase: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{prog}: {start}"), lines[0]
    assert phrase in lines[0]
    assert "Traceback" not in result.stderr


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(tmp_path)


@pytest.mark.parametrize(("args", "env", "start", "phrase"), AGENT_CASES)
def test_serve_refuses_a_bad_value_in_one_line(paths: Paths, args: list[str], env: dict[str, str],
                                               start: str, phrase: str) -> None:
    stdin = "".join(orjson.dumps(m).decode() + "\n" for m in NEW_SESSION)
    has_store = "--store" in args
    argv = ["serve", *([] if has_store else ["--store", str(paths.store)]), *paths.fill(args)]
    result = run(argv, paths.env(env), paths.root, stdin)
    check_refused(result, "acp-bridge", start, phrase)
    assert stored_sessions(paths.store) == []


@pytest.mark.parametrize(("args", "env", "start", "phrase"), WRAP_CASES)
def test_wrap_refuses_a_bad_value_in_one_line(paths: Paths, args: list[str], env: dict[str, str],
                                              start: str, phrase: str) -> None:
    stdin = "".join(orjson.dumps(m).decode() + "\n" for m in NEW_SESSION)
    agent = [*ACP_BRIDGE, "serve", "--store", str(paths.root / "inner")]
    argv = ["wrap", *([] if "--store" in args else ["--store", str(paths.store)]), *paths.fill(args), "--", *agent]
    result = run(argv, paths.env(env), paths.root, stdin)
    check_refused(result, "acp-bridge wrap", start, phrase)
    assert stored_sessions(paths.store) == [] and stored_sessions(paths.root / "inner") == []


@pytest.mark.parametrize(("args", "status"), [(["--cancel-grace", "soon"], 2), (["--backend", "paper"], 2),
                                              (["--help"], 0)])
def test_wrap_stops_the_child_it_spawned_before_reading_its_options(paths: Paths, args: list[str],
                                                                    status: int) -> None:
    """`wrap ... -- COMMAND` spawns COMMAND before it reads its options (issue 32): when
    they are refused (or only --help is asked), the child is killed with its group, and
    the editor is told nothing. (Were it not, the watchdog would kill it at our exit:
    tools/reaper.py; no process of it may be left either way.)"""
    pid_file, mark = paths.root / "child.pid", f"31.{os.getpid()}"
    # (It may be killed before it writes its pid: then no process of it may be left.)
    child = ["/bin/sh", "-c", f'echo $$ > "{pid_file}"; exec sleep {mark}']
    stdin = "".join(orjson.dumps(m).decode() + "\n" for m in NEW_SESSION)
    result = run(["wrap", "--store", str(paths.store), *args, "--", *child], clean_env(), paths.root, stdin)
    assert result.returncode == status, result.stderr
    if status:
        check_refused(result, "acp-bridge wrap", args[0], "")
    else:
        assert "usage: acp-bridge wrap" in result.stdout
    if pid_file.exists():
        assert wait_gone([int(pid_file.read_text())], 2.0) == []
    assert wait_gone(processes_running(["sleep", mark]), 2.0) == []


def processes_running(argv: list[str]) -> list[int]:
    """The pids whose command line is `argv` (Linux /proc)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if proc.joinpath("cmdline").read_bytes().split(b"\0")[:-1] == [a.encode() for a in argv]:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


CHAT_CASES = [case for case in AGENT_CASES if "--log-level" not in case[0] and "--log-file" not in case[0]
              and "--max-steps" not in case[0]]


@pytest.mark.parametrize(("args", "env", "start", "phrase"), CHAT_CASES)
def test_chat_refuses_a_bad_value_before_starting_the_agent(paths: Paths, args: list[str], env: dict[str, str],
                                                            start: str, phrase: str) -> None:
    argv = ["chat", *([] if "--store" in args else ["--store", str(paths.store)]), "--cwd", str(paths.root),
            *paths.fill(args)]
    result = run(argv, paths.env(env), paths.root, "hello\n")
    check_refused(result, "acp-bridge chat", start, phrase)
    assert stored_sessions(paths.store) == []  # no empty "no turns" session left behind


def test_chat_wrap_checks_the_wrappers_values(paths: Paths) -> None:
    result = run(["chat", "--store", str(paths.store), "--backend", "memory", "--wrap", "--", "some-agent"],
                 clean_env(), paths.root, "hello\n")
    check_refused(result, "acp-bridge chat", "--backend: ", "memory backend keeps nothing on disk")


@pytest.mark.parametrize(("args", "env", "start", "phrase"), GRACE_CASES)
def test_chat_wrap_checks_the_cancel_grace(paths: Paths, args: list[str], env: dict[str, str],
                                           start: str, phrase: str) -> None:
    result = run(["chat", "--store", str(paths.store), "--wrap", *args, "--", "some-agent"],
                 paths.env(env), paths.root, "hello\n")
    check_refused(result, "acp-bridge chat", start, phrase)
    assert stored_sessions(paths.store) == []


@pytest.mark.parametrize(("args", "env", "start", "phrase"), [
    (["list", "--store", "{file}"], {}, "--store: ", "is not a folder"),
    (["--store", "{file}", "show", "0123abcd"], {}, "--store: ", "is not a folder"),
    (["export", "0123abcd", "--store", "{file}"], {}, "--store: ", "is not a folder"),
    (["list"], {"ACP_BRIDGE_HOME": "{file}"}, "$ACP_BRIDGE_HOME: ", "is not a folder"),
    (["list"], {"ACP_BRIDGE_BACKEND": "foo", "ACP_BRIDGE_HOME": "{store}"}, "$ACP_BRIDGE_BACKEND: ",
     "unknown backend 'foo'"),
    (["list", "--backend", "memory", "--store", "{store}"], {}, "--backend: ", "memory backend"),
])
def test_sessions_refuses_a_bad_store_or_backend(paths: Paths, args: list[str], env: dict[str, str],
                                                 start: str, phrase: str) -> None:
    result = run(["sessions", *paths.fill(args)], paths.env(env), paths.root)
    check_refused(result, "acp-bridge sessions", start, phrase)


def test_sessions_of_a_missing_store_is_an_error_naming_it(paths: Paths) -> None:
    """It was "No sessions", exit 0 (issue 36, point 3): a typo looked like an empty store."""
    result = run(["sessions", "list", "--store", str(paths.store)], clean_env(), paths.root)
    check_refused(result, "acp-bridge sessions", "--store: ", f"no store at {paths.store}")


def test_demo_refuses_a_store_that_is_a_file(paths: Paths) -> None:
    result = run(["demo", "--store", str(paths.file)], clean_env(), paths.root)
    check_refused(result, "acp-bridge demo", "--store: ", "is not a folder")


@pytest.mark.parametrize("order", ["before", "after", "both"])
def test_the_agents_options_may_come_before_serve(paths: Paths, order: str) -> None:
    # `acp-bridge [options] serve [options]`: the same options either side (the
    # agent's); one given on both sides takes its value after `serve`.
    script = paths.root / "script.json"
    write_script(script, {"text": "hi"})
    mine = ["--store", str(paths.store), "--model", f"script:{script}"]
    argv = {"before": [*mine, "serve"], "after": ["serve", *mine],
            "both": ["--store", str(paths.folder), "--model", "echo", "serve", *mine]}[order]
    result = run(argv, clean_env(), paths.root, "")
    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    assert f": store {paths.store} (jsonl), model script:{script}\n" in result.stderr


@pytest.mark.parametrize("argv", [
    ["--store", "{store}", "sessions"],
    ["--store", "{store}", "sessions", "list"],
    ["--backend", "sqlite", "chat", "--store", "{store}"],
    ["--log-level", "info", "wrap", "--", "some-agent"],
    ["--store", "{store}", "demo"],
    ["--model", "echo", "setup", "zed"],
])
def test_options_before_another_subcommand_are_refused_in_one_line(paths: Paths, argv: list[str]) -> None:
    # They are the agent's options: taken, they would be lost (or `sessions` would serve
    # the agent on stdin). The line says where they go.
    stdin = "".join(orjson.dumps(m).decode() + "\n" for m in NEW_SESSION)
    result = run(paths.fill(argv), clean_env(), paths.root, stdin)
    command = next(a for a in argv if not a.startswith(("-", "{")) and a not in ("sqlite", "info", "echo"))
    check_refused(result, "acp-bridge", f"options before {command!r} are the agent's", f"acp-bridge {command} --help")
    assert stored_sessions(paths.store) == []


@pytest.mark.parametrize("debug", [["--log-level", "debug"], ["--log-level=debug"]])
def test_the_debug_log_level_adds_the_traceback(paths: Paths, debug: list[str]) -> None:
    result = run(["serve", "--store", str(paths.store), *debug, "--model", f"script:{paths.missing_script}"],
                 clean_env(), paths.root, "")
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert "ModelSpecError" in result.stderr  # the cause, chained
    assert lines[-1] == f"acp-bridge: --model: cannot read model script {paths.missing_script}: " \
                        "No such file or directory"
    assert stored_sessions(paths.store) == []


def test_a_missing_openai_key_is_not_a_start_up_error(paths: Paths) -> None:
    """Whether a key is needed is the endpoint's business (a local server takes none):
    the agent starts and answers `initialize`."""
    stdin = orjson.dumps(NEW_SESSION[0]).decode() + "\n"
    result = run(["serve", "--store", str(paths.store), "--model", "openai:llama3.2"],
                 clean_env(OPENAI_BASE_URL="http://127.0.0.1:9/v1"), paths.root, stdin)
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout.splitlines()[0])["id"] == 1


def test_checking_an_openai_spec_stays_off_httpx() -> None:
    """The start-up check of `openai:` reads its settings without importing httpx (the
    agent's start-up path stays lean; httpx comes with the first model call's session),
    and the command line's own module imports nothing of the store before a command runs
    (the error types, acp_bridge.errors over session.errors, are all it takes of it)."""
    code = ("import sys; import acp_bridge.cli.main; "
            "lean = {m for m in sys.modules if m.split('.')[0] == 'session'} <= {'session', 'session.errors'}; "
            "from acp_bridge.models import check_spec; check_spec('openai:gpt-4o', {}); "
            "sys.exit(0 if lean and 'httpx' not in sys.modules else 1)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30, env=clean_env())


def test_the_postgres_backend_without_its_driver_is_refused_at_start_up(paths: Paths) -> None:
    # psycopg hidden (a sitecustomize that blocks its import, as if the `postgres` extra
    # had not been installed): refused in one line with the install hint, before
    # anything is served, instead of failing the first session/new.
    hidden = paths.root / "no-psycopg"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text('import sys\nsys.modules["psycopg"] = None\n')
    env = clean_env(PYTHONPATH=os.pathsep.join(filter(None, [str(hidden), os.environ.get("PYTHONPATH")])))
    store = ["--backend", "postgres", "--store", "postgresql://nobody@127.0.0.1:9/none"]
    stdin = "".join(orjson.dumps(m).decode() + "\n" for m in NEW_SESSION)
    for argv, prog in ((["serve", *store], "acp-bridge"),
                       (["wrap", *store, "--", sys.executable, "-c", "pass"], "acp-bridge wrap"),
                       (["chat", *store], "acp-bridge chat"),
                       (["sessions", *store, "list"], "acp-bridge sessions")):
        result = run(argv, env, paths.root, stdin)
        check_refused(result, prog, "--backend: ", "pip install 'acp-bridge[postgres]'")
    assert "needs psycopg 3" in result.stderr
    # From the environment too, named as such.
    result = run(["serve", "--store", "postgresql://nobody@127.0.0.1:9/none"],
                 {**env, "ACP_BRIDGE_BACKEND": "postgres"}, paths.root, stdin)
    check_refused(result, "acp-bridge", "$ACP_BRIDGE_BACKEND: ", "acp-bridge[postgres]")
