"""Issue 16 item 2, the model selector: several `--model`s, the `model` and
`thought_level` config options, `session/set_config_option`, the switch recorded in the
log (`config/set`) and carried through `session/load`, the next turn on the new model,
the reasoning effort on the OpenAI wire, and `/model` in the terminal chat. The real
agent runs as a subprocess; every message it sends is validated against the ACP schema
by the test client, and the new shapes are pinned by snapshots."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from acp_bridge.agent.engine import config_options
from acp_bridge.errors import ModelSpecError
from acp_bridge.host.updates import UpdateContext, updates_for
from acp_bridge.models.catalog import ModelEntry, parse_spec, parse_specs
from acp_bridge.models.options import choice_for
from session import Event, check_invariants
from session.errors import InvariantError
from session.transcript import derive_messages
from tests.support.acp_client import AgentError, AgentProcess, normalized, write_script
from tests.support.acp_schema import validate_def
from tests.support.logs import Script, closers_of, events_of, loaded_events
from tests.support.sse_server import SSEServer, text_reply
from tests.test_chat import run_chat

pytestmark = pytest.mark.anyio


# --- the catalog: specs, flags, tables ---------------------------------------------------


def test_specs_flags_and_tables() -> None:
    assert parse_spec("echo") == ModelEntry("echo")
    assert parse_spec("script:/s.json") == ModelEntry("script:/s.json")
    assert parse_spec("script:/s.json#images,reasoning") == ModelEntry("script:/s.json", images=True, reasoning=True)
    assert parse_spec("openai:gpt-4o") == ModelEntry("openai:gpt-4o", images=True)
    assert parse_spec("openai:o4-mini") == ModelEntry("openai:o4-mini", images=True, reasoning=True)
    assert parse_spec("openai:o3-mini") == ModelEntry("openai:o3-mini", reasoning=True)  # text only
    assert parse_spec("openai:openrouter/gpt-5") == ModelEntry("openai:openrouter/gpt-5", images=True, reasoning=True)
    assert parse_spec("openai:llama3.2") == ModelEntry("openai:llama3.2")
    assert parse_spec("openai:llava:13b") == ModelEntry("openai:llava:13b", images=True)  # ':' in a name
    assert parse_spec("openai:llama3.2#images") == ModelEntry("openai:llama3.2", images=True)
    assert parse_spec("openai:gpt-4o#no-images") == ModelEntry("openai:gpt-4o")
    assert parse_spec("openai:o4-mini#no-reasoning") == ModelEntry("openai:o4-mini", images=True)
    with pytest.raises(ModelSpecError, match="unknown flag 'vision'"):
        parse_spec("openai:x#vision")
    with pytest.raises(ModelSpecError, match="unknown model 'gemini:x'"):
        parse_spec("gemini:x")
    with pytest.raises(ModelSpecError, match="needs a model name"):
        parse_spec("openai:")
    with pytest.raises(ModelSpecError, match="given twice"):
        parse_specs(["echo", "echo#images"])
    assert [e.spec for e in parse_specs(["openai:a", "echo"])] == ["openai:a", "echo"]


@pytest.mark.integration
def test_a_bad_model_is_refused_at_start_up(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "acp_bridge", "--store", str(tmp_path / "s"), "--model", "echo",
                          "--model", "openai:gpt-4o#vision"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "acp-bridge: --model: model 'openai:gpt-4o#vision': unknown flag 'vision' after '#'; use images, no-images, "
        "reasoning, no-reasoning"]
    assert out.stdout == "" and not (tmp_path / "s").exists()


# --- end to end: switch, record, load, next turn -----------------------------------------


def options_of(answer: dict[str, Any]) -> dict[str, Any]:
    return {o["id"]: o for o in answer["configOptions"]}


def two_scripts(tmp_path: Path) -> tuple[str, str]:
    fast = write_script(tmp_path / "fast.json", {"text": "fast one"}, {"text": "fast two"})
    strong = write_script(tmp_path / "strong.json", {"text": "strong one"}, {"text": "strong two"},
                          {"text": "strong three"})
    return fast, strong + "#reasoning"


def texts(agent: AgentProcess, sid: str) -> list[str]:
    return [u["content"]["text"] for u in agent.updates_of(sid) if u["sessionUpdate"] == "agent_message_chunk"]


@pytest.mark.integration
async def test_switch_is_recorded_survives_load_and_runs_the_next_turn(
        tmp_path: Path, work: Path, snapshot_json: Any) -> None:
    fast, strong = two_scripts(tmp_path)
    strong_spec = strong.removesuffix("#reasoning")
    store = tmp_path / "store"
    async with AgentProcess(store, model=fast, args=("--model", strong)) as agent:
        await agent.initialize()
        new = await agent.request("session/new", {"cwd": str(work), "mcpServers": []})
        sid = new["sessionId"]
        options = options_of(new)
        assert list(options) == ["mode", "model"]  # the fast model takes no reasoning effort
        assert options["model"]["category"] == "model" and options["model"]["currentValue"] == fast
        assert [o["value"] for o in options["model"]["options"]] == [fast, strong_spec]
        assert (await agent.prompt(sid, "hi"))["stopReason"] == "end_turn"
        switched = await agent.request("session/set_config_option",
                                       {"sessionId": sid, "configId": "model", "value": strong_spec})
        validate_def("SetSessionConfigOptionResponse", switched)
        options = options_of(switched)
        assert options["model"]["currentValue"] == strong_spec
        assert options["thought_level"]["category"] == "thought_level"
        assert options["thought_level"]["currentValue"] == "medium"
        update = agent.updates_of(sid)[-1]
        assert update["sessionUpdate"] == "config_option_update" and update["configOptions"] == switched["configOptions"]
        high = await agent.request("session/set_config_option",
                                   {"sessionId": sid, "configId": "thought_level", "value": "high"})
        assert options_of(high)["thought_level"]["currentValue"] == "high"
        # No turn since the switch: the log alone carries it into the next process.
    assert texts(agent, sid) == ["fast ", "one"]
    events = loaded_events(store, sid)
    check_invariants(cast("list[Event]", events), closed=True)
    assert [(e["type"], e["data"]) for e in events if e["type"] == "config/set"] == [
        ("config/set", {"configId": "model", "value": strong_spec}),
        ("config/set", {"configId": "thought_level", "value": "high"})]

    async with AgentProcess(store, model=fast, args=("--model", strong)) as again:
        await again.initialize()
        loaded = await again.load_session(sid, work)
        options = options_of(loaded)
        assert options["model"]["currentValue"] == strong_spec
        assert options["thought_level"]["currentValue"] == "high"
        assert (await again.prompt(sid, "next"))["stopReason"] == "end_turn"
        assert texts(again, sid)[-2:] == ["strong ", "one"]
        back = await again.request("session/set_config_option", {"sessionId": sid, "configId": "model", "value": fast})
        assert list(options_of(back)) == ["mode", "model"]  # no thought level for the fast model
        assert (await again.prompt(sid, "and again"))["stopReason"] == "end_turn"
        assert texts(again, sid)[-2:] == ["fast ", "one"]
    starts = [e["data"] for e in loaded_events(store, sid) if e["type"] == "turn/start"]
    assert [(s["model"], s.get("thoughtLevel")) for s in starts] == [
        (fast, None), (strong_spec, "high"), (fast, None)]
    assert normalized(config_traffic(agent) + config_traffic(again), tmp_path) == snapshot_json


def sizes(agent: AgentProcess, sid: str) -> list[int]:
    return [u["size"] for u in agent.updates_of(sid) if u["sessionUpdate"] == "usage_update"]


@pytest.mark.integration
async def test_a_replayed_turn_shows_the_window_of_the_model_it_ran_on(tmp_path: Path, work: Path) -> None:
    # Turn 1 on a script (200 000 tokens), turn 2 on echo (1 000 000). Loaded by agents
    # whose default model is the other one, or that no longer offer the script, each
    # turn's usage_update.size is the one it was streamed with.
    script = write_script(tmp_path / "script.json", {"text": "one", "usage": {"inputTokens": 5, "outputTokens": 1}})
    store = tmp_path / "store"
    async with AgentProcess(store, model=script, args=("--model", "echo")) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "hi")
        await agent.request("session/set_config_option", {"sessionId": sid, "configId": "model", "value": "echo"})
        await agent.prompt(sid, "hi again")
    live = sizes(agent, sid)
    assert live == [200_000, 1_000_000]
    for models in (("echo", "--model", script), ("echo",)):
        async with AgentProcess(store, model=models[0], args=models[1:]) as again:
            await again.initialize()
            await again.load_session(sid, work)
            assert sizes(again, sid) == live, models


def config_traffic(agent: AgentProcess) -> list[tuple[str, Any]]:
    """The messages about config options: set requests, answers carrying options, updates."""
    def about_config(message: Any) -> bool:
        result = message.get("result")
        update = (message.get("params") or {}).get("update") or {}
        return (message.get("method") == "session/set_config_option"
                or (isinstance(result, dict) and "configOptions" in result)
                or update.get("sessionUpdate") == "config_option_update")

    return [(d, m) for d, m in agent.transcript if about_config(m)]


@pytest.mark.integration
async def test_bad_switches_are_clear_errors(tmp_path: Path, work: Path) -> None:
    fast, _ = two_scripts(tmp_path)
    hang = write_script(tmp_path / "hang.json", {"text": "thinking", "hang": True})
    async with AgentProcess(tmp_path / "store", model=hang, args=("--model", fast)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        cases: list[tuple[dict[str, Any], str, str]] = [({"configId": "model", "value": "openai:gpt-9"}, "unknown model 'openai:gpt-9': use one of", "value"),
                 ({"configId": "model", "value": 7}, "value must be a string or a boolean, not int 7", "value"),
                 ({"configId": "mode", "value": {}}, "value must be a string or a boolean", "value"),
                 ({"configId": "model"}, "value is required", "value"),
                 ({"configId": "thought_level", "value": "high"},
                  "unknown config option 'thought_level': this session has mode, model", "configId"),
                 ({"configId": "colour", "value": "red"}, "unknown config option 'colour'", "configId")]
        for params, message, field in cases:
            with pytest.raises(AgentError) as bad:
                await agent.request("session/set_config_option", {"sessionId": sid, **params})
            assert bad.value.code == -32602 and message in str(bad.value.message)
            assert (bad.value.data or {})["field"] == field
        async with anyio.create_task_group() as tg:
            agent.prompt_soon(tg, sid, "go")
            await agent.wait_for(lambda: bool(texts(agent, sid)))
            with pytest.raises(AgentError) as busy:
                await agent.request("session/set_config_option", {"sessionId": sid, "configId": "model", "value": fast})
            assert busy.value.code == -32001 and (busy.value.data or {})["code"] == "prompt_in_progress"
            await agent.notify("session/cancel", {"sessionId": sid})
        # The connection and the session go on.
        ok = await agent.request("session/set_config_option", {"sessionId": sid, "configId": "model", "value": fast})
        assert options_of(ok)["model"]["currentValue"] == fast


# --- the reasoning effort on the OpenAI wire ----------------------------------------------


@pytest.fixture
def server() -> Any:
    with SSEServer() as s:
        yield s


@pytest.mark.integration
async def test_thought_level_reaches_the_api_as_reasoning_effort(
        tmp_path: Path, work: Path, server: SSEServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-effort")
    server.push(text_reply("plain"), text_reply("deep"), text_reply("deeper"))
    async with AgentProcess(tmp_path / "store", model="openai:gpt-4o", args=("--model", "openai:o4-mini")) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "one")
        await agent.request("session/set_config_option", {"sessionId": sid, "configId": "model", "value": "openai:o4-mini"})
        await agent.prompt(sid, "two")
        await agent.request("session/set_config_option", {"sessionId": sid, "configId": "thought_level", "value": "low"})
        await agent.prompt(sid, "three")
    bodies = [r.json for r in server.requests]
    assert [(b["model"], b.get("reasoning_effort")) for b in bodies] == [
        ("gpt-4o", None), ("o4-mini", "medium"), ("o4-mini", "low")]


# --- the terminal chat --------------------------------------------------------------------


@pytest.mark.integration
def test_chat_model_command(tmp_path: Path) -> None:
    fast, strong = two_scripts(tmp_path)
    strong_spec = strong.removesuffix("#reasoning")
    work = tmp_path / "work"
    work.mkdir()
    code, out, err, _ = run_chat(tmp_path / "store", work, [
        "hi", "/model", f"/model {strong_spec}", "hello", "/model nope", "/quit",
    ], "--model", fast, "--model", strong)
    assert code == 0, err
    assert "fast one" in out and "strong one" in out
    assert out.index("fast one") < out.index("strong one")
    assert (f"models (* current):\n* {fast}  ({fast}: takes text only)\n"
            f"  {strong_spec}  ({strong_spec}: takes a reasoning effort)\n") in out
    assert f"model {strong_spec}\n" in out
    assert "unknown model 'nope'" in out + err


# --- the config/set event: invariants and crash repair ------------------------------------


def test_config_set_invariants_and_repair() -> None:
    model = {"configId": "model", "value": "echo"}
    ok = (Script().add("config/set", dict(model)).text_turn().add("config/set", {**model, "value": "x"})
          .start_turn().add("config/set", {"turn": 2, **model}).start_step().chunk("a"))
    events = events_of(ok)
    tracker = check_invariants(events)
    assert tracker.in_turn  # the log ends inside turn 2, after a config/set inside it
    closers = closers_of(events)
    assert [e["type"] for e in closers] == ["step/end", "turn/end"]
    check_invariants([*events, *closers], closed=True)
    closed = events_of(Script().text_turn().add("config/set", dict(model)))
    assert closers_of(closed) == []  # a setting after the last turn/end leaves nothing open
    bad = [
        (Script().text_turn().add("config/set", {"turn": 1, **model}), "between turns it names no turn"),
        (Script().start_turn().add("config/set", dict(model)), "names turn None, the open turn is 1"),
        (Script().add("config/set", {"configId": "model", "value": 3}), "configId and value must be strings"),
    ]
    for script, problem in bad:
        with pytest.raises(InvariantError, match=problem):
            check_invariants(events_of(script))
    # Readers that do not show settings skip it: the transcript and the update mapping.
    assert derive_messages(events) == derive_messages([e for e in events if e["type"] != "config/set"])
    assert updates_for(events[0], UpdateContext(replay=True)) == []


@pytest.mark.integration
async def test_an_acknowledged_switch_survives_kill9(tmp_path: Path, work: Path) -> None:
    fast, strong = two_scripts(tmp_path)
    strong_spec = strong.removesuffix("#reasoning")
    store = tmp_path / "store"
    async with AgentProcess(store, model=fast, args=("--model", strong)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.request("session/set_config_option", {"sessionId": sid, "configId": "model", "value": strong_spec})
        agent.kill9()  # right after the answer: the switch was durable before it
    assert [e["data"] for e in loaded_events(store, sid) if e["type"] == "config/set"] == [
        {"configId": "model", "value": strong_spec}]


def test_config_option_shapes_match_the_schema() -> None:
    models = parse_specs(["echo", "openai:o4-mini", "script:/s.json#images"])
    for entry in models:
        for effort in ("low", "high", None):
            choice = choice_for(entry, effort)
            options = config_options("ask", models, choice)
            assert [o["id"] for o in options] == ["mode", "model", *(["thought_level"] if entry.reasoning else [])]
            for option in options:
                validate_def("SessionConfigOption", option)
            validate_def("ConfigOptionUpdate", {"configOptions": options})
    assert choice_for(models[1], None).effort == "medium" and choice_for(models[1], "high").effort == "high"
    assert choice_for(models[0], "high").effort is None


@pytest.mark.integration
async def test_a_mode_switch_survives_a_reload_as_a_model_switch_does(tmp_path: Path, work: Path) -> None:
    """A `/mode` switch (session/set_mode) was lost on reload while `/model` was kept:
    both are recorded at the switch (`config/set`) and the last one recorded wins
    (issue 36, point 6)."""
    fast, strong = two_scripts(tmp_path)
    strong_spec = strong.removesuffix("#reasoning")
    store = tmp_path / "store"
    async with AgentProcess(store, model=fast, args=("--model", strong)) as agent:
        await agent.initialize()
        sid = (await agent.request("session/new", {"cwd": str(work), "mcpServers": []}))["sessionId"]
        assert (await agent.prompt(sid, "hi"))["stopReason"] == "end_turn"
        await agent.request("session/set_mode", {"sessionId": sid, "modeId": "read_only"})
        await agent.request("session/set_config_option", {"sessionId": sid, "configId": "model", "value": strong_spec})
        await agent.request("session/set_mode", {"sessionId": sid, "modeId": "read_only"})  # no change: no event
    events = loaded_events(store, sid)
    check_invariants(cast("list[Event]", events), closed=True)
    assert [e["data"] for e in events if e["type"] == "config/set"] == [
        {"configId": "mode", "value": "read_only"}, {"configId": "model", "value": strong_spec}]
    async with AgentProcess(store, model=fast, args=("--model", strong)) as again:
        await again.initialize()
        loaded = await again.load_session(sid, work)
        assert loaded["modes"]["currentModeId"] == "read_only"
        assert options_of(loaded)["mode"]["currentValue"] == "read_only"
        assert options_of(loaded)["model"]["currentValue"] == strong_spec
        # The switch is recorded once, at the switch: the turn after it and the close add none.
        await again.request("session/set_config_option", {"sessionId": sid, "configId": "mode", "value": "ask"})
        assert (await again.prompt(sid, "again"))["stopReason"] == "end_turn"
    assert sum(e["type"] == "config/set" for e in loaded_events(store, sid)) == 3
    async with AgentProcess(store, model=fast, args=("--model", strong)) as third:
        await third.initialize()
        assert (await third.load_session(sid, work))["modes"]["currentModeId"] == "ask"


@pytest.mark.integration
async def test_a_mode_switch_is_durable_when_it_is_answered(tmp_path: Path, work: Path) -> None:
    """A mode switch was written when the next turn started or the session closed: a
    kill -9 between the switch's answer and either lost it, while a model switch was
    kept (issue 36). Now both are durable before their answer, by one rule."""
    fast, strong = two_scripts(tmp_path)
    store = tmp_path / "store"
    async with AgentProcess(store, model=fast, args=("--model", strong)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "hi"))["stopReason"] == "end_turn"
        await agent.request("session/set_mode", {"sessionId": sid, "modeId": "read_only"})
        agent.kill9()
    events = loaded_events(store, sid)
    assert [e["data"] for e in events if e["type"] == "config/set"] == [{"configId": "mode", "value": "read_only"}]
    async with AgentProcess(store, model=fast, args=("--model", strong)) as again:
        await again.initialize()
        loaded = await again.load_session(sid, work)
    assert loaded["modes"]["currentModeId"] == "read_only"
    assert options_of(loaded)["mode"]["currentValue"] == "read_only"


@pytest.mark.integration
async def test_a_mode_switched_while_a_turn_runs_is_recorded_when_it_ends(tmp_path: Path, work: Path) -> None:
    """The log has one writer: a switch during a turn applies to it at once and is
    written right after its `turn/end`, before the prompt's answer."""
    store = tmp_path / "store"
    slow = write_script(tmp_path / "slow.json", {"text": "a slow answer in several words"}, chunk_delay_ms=150)
    async with AgentProcess(store, model=slow) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            answers: list[Any] = []

            async def run() -> None:
                answers.append(await agent.prompt(sid, "take your time"))
            tg.start_soon(run)
            await agent.wait_for(lambda: any(u["sessionUpdate"] == "agent_message_chunk"
                                             for u in agent.updates_of(sid)))
            await agent.request("session/set_mode", {"sessionId": sid, "modeId": "read_only"})
        assert answers[0]["stopReason"] == "end_turn"
        agent.kill9()
    events = loaded_events(store, sid)
    kinds = [e["type"] for e in events]
    assert kinds[kinds.index("turn/end") + 1] == "config/set"
    assert [e["data"] for e in events if e["type"] == "config/set"] == [{"configId": "mode", "value": "read_only"}]


@pytest.mark.integration
@pytest.mark.parametrize("caps", [{"session": {"notices": {}}}, {}], ids=["notices", "none"])
async def test_a_load_whose_model_is_gone_is_a_notice_before_its_answer(
        tmp_path: Path, work: Path, caps: dict[str, Any]) -> None:
    store, model = tmp_path / "store", write_script(tmp_path / "script.json", {"text": "hi"})
    async with AgentProcess(store, model=model) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "hello")
    async with AgentProcess(store, model="echo") as agent:  # the script is no longer offered
        await agent.initialize(caps)
        loaded = await agent.load_session(sid, work)
        assert loaded["configOptions"][1]["currentValue"] == "echo"
        notices = [u for u in agent.replayed(sid) if u["sessionUpdate"] == "notice"]
        assert notices == ([{"sessionUpdate": "notice", "severity": "warning",
                             "title": "The session's model is not available",
                             "description": f"{model} is not configured in this agent: the session continues "
                                            "with echo."}] if caps else [])
        assert (await agent.prompt(sid, "still here"))["stopReason"] == "end_turn"
