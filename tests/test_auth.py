"""Issue 16 item 4, auth: an `openai:` model without a key lists auth methods the
stable ACP schema allows (an `agent` method, and a `terminal` one for clients that can
run it), `session/new` fails -32000 `auth_required` until a key is there, the terminal
login checks and stores the key (0600), `authenticate` checks it with the provider
(the loopback OpenAI-compatible server), and no key ever reaches the session log or
the agent's log."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_bridge.agent.auth import auth_methods
from acp_bridge.models.catalog import parse_specs
from acp_bridge.models.openai_key import find_key, key_problem, save_key
from tests.support.acp_client import AgentError, AgentProcess, normalized
from tests.support.acp_schema import validate_def
from tests.support.sse_server import Reply, SSEServer, error_reply, text_reply

pytestmark = pytest.mark.anyio

GOOD_KEY = "sk-good-0123456789abcdef"
BAD_KEY = "sk-revoked-fedcba9876543210"


def models_list() -> Reply:
    return Reply(headers={"Content-Type": "application/json"}, chunks=[b'{"object": "list", "data": []}'],
                 chunked=False)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    with SSEServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.delenv("ACP_BRIDGE_LOGIN", raising=False)
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
        yield server


def key_path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "acp-bridge" / "openai-api-key"


def terminal_login(agent: AgentProcess, key: str) -> subprocess.CompletedProcess[str]:
    """What a client does for the `terminal` method: run the agent's own command with
    the method's `env`, in a terminal (here the key comes on stdin)."""
    return subprocess.run(agent.command, input=key + "\n", capture_output=True, text=True, timeout=30,
                          env={**os.environ, "ACP_BRIDGE_LOGIN": "1"})


@pytest.mark.integration
async def test_no_key_auth_methods_login_authenticate_then_sessions(
        tmp_path: Path, work: Path, env: SSEServer, snapshot_json: Any) -> None:
    store, agent_log = tmp_path / "store", tmp_path / "agent.log"
    args = ("--log-file", str(agent_log), "--log-level", "debug")
    async with AgentProcess(store, model="openai:gpt-4o", args=args) as agent:
        plain = await agent.initialize()
        assert plain["authMethods"] == [{
            "id": "openai-api-key", "name": "OpenAI API key",
            "description": "Set OPENAI_API_KEY in the agent's environment (any value for a local server that "
                           "does not check keys), or run `acp-bridge login` in a terminal to store a key; then "
                           "authenticate to check it."}]
        init = await agent.initialize({"auth": {"terminal": True}})
        assert [m["id"] for m in init["authMethods"]] == ["openai-api-key", "openai-api-key-terminal"]
        terminal = init["authMethods"][1]
        assert terminal["type"] == "terminal" and terminal["env"] == {"ACP_BRIDGE_LOGIN": "1"}

        with pytest.raises(AgentError) as needed:
            await agent.new_session(work)
        assert needed.value.code == -32000
        assert needed.value.data == {"code": "auth_required",
                                     "authMethods": ["openai-api-key", "openai-api-key-terminal"]}
        assert "OPENAI_API_KEY" in str(needed.value.message) and "acp-bridge login" in str(needed.value.message)
        with pytest.raises(AgentError) as none_yet:
            await agent.request("authenticate", {"methodId": "openai-api-key"})
        assert none_yet.value.code == -32000
        with pytest.raises(AgentError) as unknown:
            await agent.request("authenticate", {"methodId": "password"})
        assert unknown.value.code == -32602 and "openai-api-key" in str(unknown.value.message)

        env.push(error_reply(401, "Incorrect API key provided"))
        refused = terminal_login(agent, BAD_KEY)
        assert refused.returncode == 1 and "refused the key (401" in refused.stderr
        assert not key_path(tmp_path).exists()
        env.push(models_list())
        stored = terminal_login(agent, GOOD_KEY)
        assert stored.returncode == 0, stored.stderr
        assert stat.S_IMODE(key_path(tmp_path).stat().st_mode) == 0o600
        assert stat.S_IMODE(key_path(tmp_path).parent.stat().st_mode) == 0o700

        env.push(models_list())
        assert await agent.request("authenticate", {"methodId": "openai-api-key"}) == {}
        sid = await agent.new_session(work)
        env.push(text_reply("Authenticated hello."))
        assert (await agent.prompt(sid, "hello"))["stopReason"] == "end_turn"
    login_refused, login_ok, check, chat = env.requests
    assert [r.path for r in (login_refused, login_ok, check)] == ["/v1/models"] * 3
    assert login_refused.headers["authorization"] == f"Bearer {BAD_KEY}"
    assert check.headers["authorization"] == chat.headers["authorization"] == f"Bearer {GOOD_KEY}"
    assert_no_key_in(store, agent_log, agent.stderr.decode(), refused.stdout + refused.stderr,
                     stored.stdout + stored.stderr)
    ids = {m["id"] for d, m in agent.transcript
           if d == "->" and m.get("method") in ("initialize", "session/new", "authenticate")}
    auth_traffic = [(d, m) for d, m in agent.transcript if m.get("id") in ids]
    assert normalized(auth_traffic, tmp_path) == snapshot_json


@pytest.mark.integration
async def test_authenticate_refuses_a_key_the_provider_refuses(tmp_path: Path, work: Path, env: SSEServer) -> None:
    save_key(BAD_KEY)
    store, agent_log = tmp_path / "store", tmp_path / "agent.log"
    async with AgentProcess(store, model="openai:gpt-4o", args=("--log-file", str(agent_log),
                                                                "--log-level", "debug")) as agent:
        await agent.initialize()
        env.push(error_reply(401, "Incorrect API key provided", code="invalid_api_key"))
        with pytest.raises(AgentError) as refused:
            await agent.request("authenticate", {"methodId": "openai-api-key"})
        assert refused.value.code == -32000 and refused.value.data["code"] == "auth_required"  # type: ignore[index]
        assert "the API key was not accepted" in str(refused.value.message)
        # A key is there (the provider judges it at the first prompt): sessions start.
        sid = await agent.new_session(work)
        # A server that quotes the key it refused: the message is kept, the key is not.
        env.push(error_reply(401, f"Incorrect API key provided: {BAD_KEY}.", code="invalid_api_key"))
        with pytest.raises(AgentError) as turn:
            await agent.prompt(sid, "hello")
        assert turn.value.code == -32000
        assert "Incorrect API key provided: [the API key]." in str(turn.value.message)
    assert_no_key_in(store, agent_log, agent.stderr.decode())


@pytest.mark.integration
async def test_a_key_in_the_environment_needs_no_authenticate(tmp_path: Path, work: Path, env: SSEServer,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", GOOD_KEY)
    env.push(text_reply("hi"))
    async with AgentProcess(tmp_path / "store", model="openai:gpt-4o") as agent:
        init = await agent.initialize()
        assert [m["id"] for m in init["authMethods"]] == ["openai-api-key"]  # to check or replace it
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "hello"))["stopReason"] == "end_turn"
    assert env.requests[0].headers["authorization"] == f"Bearer {GOOD_KEY}"


@pytest.mark.integration
async def test_switching_to_an_openai_model_without_a_key(tmp_path: Path, work: Path, env: SSEServer) -> None:
    async with AgentProcess(tmp_path / "store", model="echo", args=("--model", "openai:gpt-4o")) as agent:
        init = await agent.initialize()
        assert [m["id"] for m in init["authMethods"]] == ["openai-api-key"]
        sid = await agent.new_session(work)  # the default model needs no key
        with pytest.raises(AgentError) as needed:
            await agent.request("session/set_config_option", {"sessionId": sid, "configId": "model",
                                                              "value": "openai:gpt-4o"})
        assert needed.value.code == -32000 and needed.value.data["code"] == "auth_required"  # type: ignore[index]
        assert (await agent.prompt(sid, "still echo"))["stopReason"] == "end_turn"
    async with AgentProcess(tmp_path / "echo-store") as echo:
        assert (await echo.initialize())["authMethods"] == []


def test_key_sources_and_checks(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    assert find_key(env) is None
    path = save_key(GOOD_KEY, env)
    assert path == tmp_path / "acp-bridge" / "openai-api-key" and path.read_text() == GOOD_KEY + "\n"
    assert find_key(env) == GOOD_KEY
    assert find_key({**env, "OPENAI_API_KEY": " sk-env "}) == "sk-env"  # the variable wins
    assert key_problem("") == "the key is empty"
    assert key_problem("sk with space") is not None and key_problem("sk-\u00e9") is not None
    assert key_problem(GOOD_KEY) is None


def assert_no_key_in(store: Path, *logs: Path | str) -> None:
    """Neither key anywhere in the store's files, the agent's log file, or the texts."""
    files = [p for p in store.rglob("*") if p.is_file()]
    assert files, "the store should hold the session"
    texts = [p.read_bytes().decode("utf-8", "replace") for p in files]
    for item in logs:
        texts.append(item.read_text() if isinstance(item, Path) else item)
    for key in (GOOD_KEY, BAD_KEY):
        for text in texts:
            assert key not in text


@pytest.mark.integration
def test_initialize_with_an_openai_model_stays_lean(tmp_path: Path) -> None:
    """Offering auth methods and the model catalog costs no httpx, no key file read:
    both come only with a session or `authenticate`."""
    request = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "acp_bridge", "--store", str(tmp_path / "s"),
                          "--model", "openai:gpt-4o", "--model", "echo"],
                         input=request, capture_output=True, timeout=30, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    answer = orjson.loads(out.stdout.splitlines()[0])
    assert answer["result"]["authMethods"][0]["id"] == "openai-api-key"
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.decode().splitlines() if "|" in line}
    assert "acp_bridge.models.catalog" in imported
    assert not {"httpx", "acp_bridge.models.openai", "acp_bridge.models.openai_key"} & imported


@pytest.mark.integration
def test_login_refuses_what_cannot_be_a_key(tmp_path: Path, env: SSEServer) -> None:
    for typed, problem in (("", "the key is empty"), ("sk two words", "spaces")):
        out = subprocess.run([sys.executable, "-m", "acp_bridge", "login"], input=typed + "\n",
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 1 and problem in out.stderr and "nothing stored" in out.stderr
    assert not key_path(tmp_path).exists() and env.requests == []  # refused before asking the server


def test_auth_method_shapes_match_the_schema() -> None:
    models = parse_specs(["echo", "openai:gpt-4o"])
    plain = auth_methods(models, {})
    both = auth_methods(models, {"auth": {"terminal": True}})
    assert [m.get("type", "agent") for m in both] == ["agent", "terminal"] and plain == both[:1]
    for method in both:
        validate_def("AuthMethod", method)
    validate_def("AuthMethodTerminal", both[1])
    assert auth_methods(parse_specs(["echo", "script:/s.json"]), {"auth": {"terminal": True}}) == []


@pytest.mark.integration
async def test_logout_forgets_the_key_until_a_login(tmp_path: Path, work: Path, env: SSEServer) -> None:
    """`logout` (stable since schema-v1.21.0, advertised as agentCapabilities.auth.logout)
    removes the key `acp-bridge login` stored: the next prompt needs a key again, and a
    login plus `authenticate` brings it back."""
    save_key(GOOD_KEY)
    async with AgentProcess(tmp_path / "store", model="openai:gpt-4o") as agent:
        init = await agent.initialize({"auth": {"terminal": True}})
        assert init["agentCapabilities"]["auth"] == {"logout": {}}
        sid = await agent.new_session(work)
        env.push(text_reply("before"))
        assert (await agent.prompt(sid, "hello"))["stopReason"] == "end_turn"
        out = await agent.request("logout", {})
        assert out == {"_meta": {"acpBridge": {"removed": str(key_path(tmp_path))}}}
        assert not key_path(tmp_path).exists()
        with pytest.raises(AgentError) as needed:
            await agent.prompt(sid, "after")
        assert needed.value.code == -32000 and needed.value.data["code"] == "auth_required"  # type: ignore[index]
        with pytest.raises(AgentError):
            await agent.new_session(work)
        assert await agent.request("logout", {}) == {"_meta": {"acpBridge": {"removed": None}}}  # idempotent
        env.push(models_list())
        assert terminal_login(agent, GOOD_KEY).returncode == 0
        env.push(models_list())
        assert await agent.request("authenticate", {"methodId": "openai-api-key"}) == {}
        env.push(text_reply("again"))
        assert (await agent.prompt(sid, "and now"))["stopReason"] == "end_turn"
    assert len([r for r in env.requests if r.path.endswith("/chat/completions")]) == 2  # none while logged out


@pytest.mark.integration
async def test_logout_forgets_a_key_of_the_environment_too(tmp_path: Path, work: Path, env: SSEServer,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", GOOD_KEY)
    async with AgentProcess(tmp_path / "store", model="openai:gpt-4o") as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.request("logout", {})
        with pytest.raises(AgentError) as needed:
            await agent.prompt(sid, "hello")
        assert needed.value.code == -32000
    assert env.requests == []


@pytest.mark.integration
async def test_logout_is_not_offered_without_a_key_to_forget(tmp_path: Path, env: SSEServer) -> None:
    save_key(GOOD_KEY)
    async with AgentProcess(tmp_path / "store") as agent:  # echo: no key anywhere
        init = await agent.initialize()
        assert "auth" not in init["agentCapabilities"]
        with pytest.raises(AgentError) as unknown:
            await agent.request("logout", {})
        assert unknown.value.code == -32601
    assert key_path(tmp_path).exists()  # another configuration's key is not ours to remove


@pytest.mark.integration
async def test_logout_through_wrap_is_the_wrapped_agents(tmp_path: Path, work: Path, env: SSEServer) -> None:
    from tests.support.wrapped import WrappedProcess, serve_command

    save_key(GOOD_KEY)
    child = serve_command(tmp_path / "child-store", "openai:gpt-4o")
    async with WrappedProcess(tmp_path / "store", child) as agent:
        init = await agent.initialize()
        assert init["agentCapabilities"]["auth"] == {"logout": {}}  # the child's, passed on
        sid = await agent.new_session(work)
        assert await agent.request("logout", {}) == {"_meta": {"acpBridge": {"removed": str(key_path(tmp_path))}}}
        assert not key_path(tmp_path).exists()
        with pytest.raises(AgentError) as needed:
            await agent.prompt(sid, "hello")
        assert needed.value.code == -32000  # the child's error, as it sent it
