"""`acp-bridge setup zed` (issue 17): one command prints Zed's `agent_servers` entry, with
the absolute path of the installed executable and the chosen options, ready to paste;
and the entry it prints starts a working agent, from another folder, as Zed would run it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.acp_client import CLIENT_CAPS_NONE, AgentProcess, write_script

pytestmark = pytest.mark.integration

INSTALLED = Path(sys.executable).parent / "acp-bridge"  # the console script pip installed


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACP_BRIDGE_", "OPENAI_"))}
    return {**env, **extra}


def setup(args: list[str], cwd: Path, env: dict[str, str] | None = None,
          command: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    if command is None:
        if not INSTALLED.is_file():
            pytest.skip("no acp-bridge console script beside this Python (not pip-installed)")
        command = [str(INSTALLED)]
    return subprocess.run([*command, "setup", *args], capture_output=True, text=True, timeout=30,
                          cwd=cwd, env=env or clean_env())


def entry_of(result: subprocess.CompletedProcess[str], name: str = "acp-bridge") -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    settings = orjson.loads(result.stdout)  # stdout is the JSON and nothing else
    assert list(settings) == ["agent_servers"] and list(settings["agent_servers"]) == [name]
    entry: dict[str, Any] = settings["agent_servers"][name]
    return entry


@pytest.fixture
def here(tmp_path: Path) -> Path:
    """The folder `setup` runs in (relative paths are given from here)."""
    folder = tmp_path / "here"
    folder.mkdir()
    return folder


@pytest.mark.anyio
async def test_the_printed_entry_starts_the_agent_with_the_chosen_options(here: Path, tmp_path: Path) -> None:
    write_script(here / "model.json", {"text": "Hello from the script."})
    result = setup(["zed", "--model", "script:model.json", "--store", "store", "--backend", "sqlite",
                    "--log-level", "info", "--log-file", "agent.log"], here)
    entry = entry_of(result)
    assert entry == {
        "type": "custom",
        "command": str(INSTALLED),
        "args": ["serve", "--store", str(here / "store"), "--backend", "sqlite",
                 "--model", f"script:{here / 'model.json'}", "--log-level", "info",
                 "--log-file", str(here / "agent.log")],
        "env": {},
    }
    assert "settings.json" in result.stderr
    assert not (here / "store").exists() and not (here / "agent.log").exists()  # setup only prints
    # Zed runs it from the project's folder, not from here, and with its own environment.
    project = tmp_path / "project"
    project.mkdir()
    agent = AgentProcess(here / "store", cwd=project)
    agent.command = [entry["command"], *entry["args"]]
    async with agent:
        await agent.initialize(CLIENT_CAPS_NONE)
        sid = await agent.new_session(project)
        answer = await agent.prompt(sid, "hi")
    assert answer["stopReason"] == "end_turn"
    assert agent.returncode == 0
    assert (here / "store" / "sessions.sqlite3").is_file()  # the chosen store and backend
    assert "acp_bridge" in (here / "agent.log").read_text()  # the chosen log file


def test_defaults_are_left_out_but_the_store_is_always_named(here: Path) -> None:
    entry = entry_of(setup(["zed"], here, clean_env(ACP_BRIDGE_HOME=str(here / "home"))))
    assert entry["args"] == ["serve", "--store", str(here / "home")]
    # Chosen in the environment is chosen: written out, as Zed may not have that environment.
    env = clean_env(ACP_BRIDGE_HOME=str(here / "home"), ACP_BRIDGE_BACKEND="sqlite", ACP_BRIDGE_LOG_LEVEL="DEBUG")
    assert entry_of(setup(["zed", "--max-steps", "7"], here, env))["args"] == [
        "serve", "--store", str(here / "home"), "--backend", "sqlite", "--max-steps", "7", "--log-level", "debug"]


def test_an_openai_entry_carries_the_endpoint_but_never_the_key(here: Path) -> None:
    env = clean_env(OPENAI_BASE_URL="http://127.0.0.1:11434/v1", OPENAI_API_KEY="sk-very-secret",
                    ACP_BRIDGE_CONTEXT_WINDOW="32768")
    result = setup(["zed", "--model", "openai:llama3.2", "--store", str(here / "s")], here, env)
    entry = entry_of(result)
    assert entry["args"] == ["serve", "--store", str(here / "s"), "--model", "openai:llama3.2"]
    assert entry["env"] == {"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1", "ACP_BRIDGE_CONTEXT_WINDOW": "32768"}
    assert "sk-very-secret" not in result.stdout + result.stderr
    assert "OPENAI_API_KEY" in result.stderr  # the note says how to give it


def on_path(tmp: Path, *names: str, **extra: str) -> dict[str, str]:
    """clean_env with programs `names` (that do nothing) first on PATH."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in names:
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    return clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", **extra)


def test_a_command_after_the_dashes_is_recorded_through_wrap(here: Path, tmp_path: Path) -> None:
    wrapped = ["npx", "@zed-industries/claude-code-acp", "--flag"]
    entry = entry_of(setup(["zed", "--name", "claude (recorded)", "--store", "s", "--", *wrapped], here,
                           on_path(tmp_path, "npx")), "claude (recorded)")
    assert entry["args"] == ["wrap", "--store", str(here / "s"), "--", *wrapped]


def test_the_command_after_the_dashes_is_checked_as_the_wrapper_will(here: Path) -> None:
    """It was printed whatever it was (issue 36, point 1): an entry that cannot start."""
    result = setup(["zed", "--", "no-such-agent-here", "acp"], here)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "acp-bridge setup: --: cannot run 'no-such-agent-here': not found or not executable\n"


def test_a_multi_agent_entry(here: Path, tmp_path: Path) -> None:
    env = on_path(tmp_path, "claude-code-acp", "codex-acp")
    entry = entry_of(setup(["zed", "--store", "s", "--agent", "claude=claude-code-acp --verbose",
                            "--agent", "codex=codex-acp"], here, env))
    assert entry["args"] == ["wrap", "--store", str(here / "s"), "--agent", "claude=claude-code-acp --verbose",
                             "--agent", "codex=codex-acp"]
    result = setup(["zed", "--agent", "x=not-a-program-anywhere"], here, env)
    assert (result.returncode, result.stdout) == (2, "")
    assert "--agent: cannot run 'not-a-program-anywhere' (agent 'x')" in result.stderr


def test_a_postgres_store_is_passed_through_unchanged(here: Path) -> None:
    """It was made a path: "<cwd>/postgresql:/qa:hunter2@127.0.0.1:5439/acp" (issue 36)."""
    for conninfo in ("postgresql://qa@127.0.0.1:5439/acp", "host=127.0.0.1 port=5439 dbname=acp user=qa"):
        entry = entry_of(setup(["zed", "--backend", "postgres", "--store", conninfo], here))
        assert entry["args"] == ["serve", "--store", conninfo, "--backend", "postgres"]


@pytest.mark.parametrize("conninfo", ["postgresql://qa:hunter2@127.0.0.1:5439/acp",
                                      "host=127.0.0.1 dbname=acp password=hunter2",
                                      "postgresql://qa@127.0.0.1/acp?password=hunter2"])
def test_a_password_is_never_written(here: Path, conninfo: str) -> None:
    result = setup(["zed", "--backend", "postgres", "--store", conninfo], here)
    assert (result.returncode, result.stdout) == (2, "")
    assert "hunter2" not in result.stderr
    assert result.stderr.startswith("acp-bridge setup: --store: the connection string holds a password")
    assert "~/.pgpass" in result.stderr


def test_libpq_environment_goes_into_the_entry_but_not_its_password(here: Path) -> None:
    env = clean_env(PGHOST="127.0.0.1", PGPORT="5439", PGDATABASE="acp", PGUSER="qa", PGPASSWORD="hunter2")
    result = setup(["zed", "--backend", "postgres"], here, env)
    entry = entry_of(result)
    assert entry["args"] == ["serve", "--backend", "postgres"]
    assert entry["env"] == {"PGHOST": "127.0.0.1", "PGPORT": "5439", "PGDATABASE": "acp", "PGUSER": "qa"}
    assert "hunter2" not in result.stdout + result.stderr
    assert "PGPASSWORD is not written here" in result.stderr


def test_python_dash_m_names_the_installed_executable(here: Path) -> None:
    if not INSTALLED.is_file():
        pytest.skip("no acp-bridge console script beside this Python (not pip-installed)")
    entry = entry_of(setup(["zed"], here, command=[sys.executable, "-m", "acp_bridge"]))
    assert entry["command"] == str(INSTALLED)


@pytest.mark.parametrize(("args", "line"), [
    (["zed", "--model", "script:missing.json"], "acp-bridge setup: --model: cannot read model script"),
    (["zed", "--backend", "memory"], "acp-bridge setup: --backend: the memory backend keeps nothing on disk"),
    (["vim"], "acp-bridge setup: argument editor: invalid choice: 'vim'"),
    (["zed", "--model", "echo", "--", "agent"], "acp-bridge setup: --model and --max-steps are acp-bridge's own"),
])
def test_a_bad_value_prints_no_entry(here: Path, args: list[str], line: str) -> None:
    result = setup(args, here)
    assert (result.returncode, result.stdout) == (2, "")
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(line), result.stderr


@pytest.mark.parametrize(("section", "args"), [
    ("## Use it from an editor", ["zed", "--model", "openai:gpt-4o"]),
    ("## Wrap any ACP agent", ["zed", "--name", "claude (recorded)", "--", "npx", "@zed-industries/claude-code-acp"]),
])
def test_the_readme_shows_what_setup_prints(here: Path, section: str, args: list[str]) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split(section, 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    shown = orjson.loads(block.replace("/home/you/acp-bridge/.venv/bin/acp-bridge", str(INSTALLED))
                         .replace("/home/you", str(here)))
    env = {k: v for k, v in on_path(here.parent, "npx", HOME=str(here)).items() if k != "XDG_STATE_HOME"}
    result = setup(args, here, env)
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout) == shown
    command = " ".join(f'"{a}"' if " " in a else a for a in args)
    assert f"acp-bridge setup {command}\n" in readme  # the command the README gives
