"""The agent's secrets and the processes it starts (issue 34, point 4;
acp_bridge/tools/environment.py): a command that prints its environment must not put
the provider's key into the log (and so the search index, the exports, the served
pages, the client and the next request to the provider, which all read it from there).

- A local `run_command` gets the agent's environment without `OPENAI_API_KEY`, the
  store's connection string, and any `*_API_KEY` or `*_TOKEN`, but for those
  `$ACP_BRIDGE_PASS_ENV` names; the rest of the environment is there.
- The second line: a command the client's own terminal runs (in the editor's
  environment, which holds the key) has its output redacted before it is recorded,
  and the client is sent the redacted text.
- MCP servers get the SDK's safe list (test_mcp.py holds that the key does not reach
  one) and the names `$ACP_BRIDGE_PASS_ENV` lists.
- The table of `withheld`, `command_environment` and `Secrets` (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_bridge.tools.environment import Secrets, command_environment, withheld
from tests.support.acp_client import (
    CLIENT_CAPS_ALL,
    CLIENT_CAPS_NONE,
    AgentProcess,
    ClientPolicy,
    write_script,
)

KEY = "sk-proj-" + "S3cr3tK3y" * 4
TOKEN = "ghp_" + "t0k3n" * 6
PASSED = "npm_" + "p4ss3d" * 5
STORE_DSN = "postgresql://me:" + "pw-of-the-store-9" + "@db.example/sessions"


def test_withheld_names() -> None:
    table = {"OPENAI_API_KEY": True, "ANTHROPIC_API_KEY": True, "openai_api_key": True, "GITHUB_TOKEN": True,
             "ACP_BRIDGE_POSTGRES": True, "PGPASSWORD": True, "HOME": False, "PATH": False,
             "TOKENIZERS_PARALLELISM": False, "API_KEY_FILE": False, "MY_TOKEN_PATH": False}
    assert {name: withheld(name) for name in table} == table


def test_command_environment() -> None:
    environ = {"PATH": "/bin", "OPENAI_API_KEY": KEY, "GITHUB_TOKEN": TOKEN, "NPM_TOKEN": PASSED,
               "ACP_BRIDGE_PASS_ENV": "NPM_TOKEN, NOT_SET"}
    assert command_environment(environ) == {"PATH": "/bin", "NPM_TOKEN": PASSED, "ACP_BRIDGE_PASS_ENV": "NPM_TOKEN, NOT_SET"}
    # What the client gives a terminal is given, whatever its name.
    assert command_environment(environ, {"OPENAI_API_KEY": "from the client"})["OPENAI_API_KEY"] == "from the client"
    assert command_environment({"PATH": "/bin"}, None) == {"PATH": "/bin"}


def test_secrets_redact() -> None:
    secrets = Secrets.of({"OPENAI_API_KEY": KEY, "SHORT_TOKEN": "1", "HOME": "/home/me", "X_TOKEN": KEY[:12]},
                         [("the store's password", "pw-of-the-store-9"), ("none", None)])
    assert [label for _, label in secrets.pairs] == ["[redacted: OPENAI_API_KEY]", "[redacted: the store's password]",
                                                     "[redacted: X_TOKEN]"]  # longest first; "1" is no secret
    assert secrets.redact(f"key={KEY} pw=pw-of-the-store-9 home=/home/me one=1") == \
        "key=[redacted: OPENAI_API_KEY] pw=[redacted: the store's password] home=/home/me one=1"
    content: list[Any] = [{"type": "text", "text": f"a {KEY}"}, {"type": "content", "content": {KEY: [KEY]}}, 3]
    assert secrets.redact_json(content) == [
        {"type": "text", "text": "a [redacted: OPENAI_API_KEY]"},
        {"type": "content", "content": {"[redacted: OPENAI_API_KEY]": ["[redacted: OPENAI_API_KEY]"]}}, 3]
    assert Secrets().redact_json(content) is content


def recorded(store: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(store.rglob("*.jsonl")))


@pytest.mark.integration
@pytest.mark.anyio
@pytest.mark.parametrize("caps", ["local", "client"])
async def test_a_command_does_not_see_the_key_and_its_output_is_redacted(
        tmp_path: Path, work: Path, monkeypatch: pytest.MonkeyPatch, caps: str) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("NPM_TOKEN", PASSED)
    monkeypatch.setenv("ACP_BRIDGE_PASS_ENV", "NPM_TOKEN")
    monkeypatch.setenv("ACP_BRIDGE_POSTGRES", STORE_DSN)  # not the store here: a variable it would be read from
    monkeypatch.setenv("HARMLESS_SETTING", "visible-value")
    check = 'case "$NPM_TOKEN" in npm_*) echo "npm-token-passed-on ${#NPM_TOKEN}";; esac'  # not the value
    model = write_script(tmp_path / "m.json",
                         {"toolCalls": [{"id": "env", "name": "run_command", "arguments": {"command": "env"}},
                                        {"id": "npm", "name": "run_command", "arguments": {"command": check}}]},
                         {"text": "done"})
    store = tmp_path / "store"
    policy = ClientPolicy(permissions=["allow_once", "allow_once"])
    async with AgentProcess(store, model=model, policy=policy, cwd=work) as agent:
        await agent.initialize(CLIENT_CAPS_ALL if caps == "client" else CLIENT_CAPS_NONE)
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "print the environment"))["stopReason"] == "end_turn"
        await agent.load_session(sid, work)  # the replay too
    log = recorded(store)
    sent = b"".join(orjson.dumps(m) for way, m in agent.transcript if way == "<-")  # the agent's, live and replayed
    assert b"HARMLESS_SETTING=visible-value" in log, "the command ran and printed its environment"
    for secret in (KEY, TOKEN, PASSED, "pw-of-the-store-9"):
        assert secret.encode() not in log, secret
        assert secret.encode() not in sent, secret
    if caps == "local":
        # Withheld from the command: not even redacted, absent.
        assert b"OPENAI_API_KEY=" not in log and b"GITHUB_TOKEN=" not in log and b"ACP_BRIDGE_POSTGRES=" not in log
        # Passed on: the command had it (and printed it, redacted in the record).
        assert f"npm-token-passed-on {len(PASSED)}".encode() in log
        assert b"NPM_TOKEN=[redacted: NPM_TOKEN]" in log
    else:
        # The client's terminal ran it in the editor's environment: the second line.
        assert b"OPENAI_API_KEY=[redacted: OPENAI_API_KEY]" in log
        assert b"GITHUB_TOKEN=[redacted: GITHUB_TOKEN]" in log
    assert KEY.encode() not in agent.stderr


@pytest.mark.integration
@pytest.mark.anyio
async def test_an_mcp_server_gets_what_is_passed_on_and_no_other_secret(
        tmp_path: Path, work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.logs import loaded_events
    from tests.test_mcp import open_session, result_of, test_server, text_of

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("NPM_TOKEN", PASSED)
    monkeypatch.setenv("ACP_BRIDGE_PASS_ENV", "GITHUB_TOKEN")
    model = write_script(tmp_path / "m.json", {"toolCalls": [
        {"id": name, "name": "t__getenv", "arguments": {"name": name}}
        for name in ("OPENAI_API_KEY", "GITHUB_TOKEN", "NPM_TOKEN")]}, {"text": "done"})
    policy = ClientPolicy(permissions=["allow_always"])
    async with AgentProcess(tmp_path / "store", model=model, policy=policy) as agent:
        sid, _ = await open_session(agent, work, test_server())
        assert (await agent.prompt(sid, "look"))["stopReason"] == "end_turn"
    events = loaded_events(tmp_path / "store", sid)
    assert text_of(result_of(events, "OPENAI_API_KEY")) == "(unset)"
    assert text_of(result_of(events, "NPM_TOKEN")) == "(unset)"
    # Passed on, so the server has it; redacted all the same where it is recorded.
    assert text_of(result_of(events, "GITHUB_TOKEN")) == "[redacted: GITHUB_TOKEN]"
