"""`replay:SOURCE` (acp_bridge.models.replay): recorded calls served again at the same
(turn, step), overrides, the checks that say "record again", and bad recordings refused
as `session/load` refuses them. The recordings are the fixtures in tests/recorded/
(recorded against the loopback OpenAI-compatible server) and damaged copies of them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from acp_bridge.errors import ModelSpecError
from acp_bridge.models import (
    Finish,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallChunk,
    UsageChunk,
    load_model,
)
from acp_bridge.models.replay import ReplayModel, same_up_to_cwd
from session import SessionStore
from session.backends.jsonl import JsonlBackend
from session.transcript import Message
from tests.support.logs import Script
from tests.support.logs import write as write_log

pytestmark = pytest.mark.anyio
RECORDED = Path(__file__).resolve().parent / "recorded"


def model_of(name: str, tmp_path: Path, **env: str) -> ReplayModel:
    """A replay of the fixture `name`, copied so no overrides file lies beside it."""
    source = tmp_path / f"{name}.jsonl"
    shutil.copyfile(RECORDED / name / "session.jsonl", source)
    return ReplayModel.from_source(str(source), env=env)


def user(text: str) -> Message:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


async def served(model: ReplayModel, messages: list[Message], turn: int, step: int,
                 timeout: float = 5.0) -> list[Any]:
    out: list[Any] = []
    with anyio.move_on_after(timeout):
        async for chunk in model.stream(ModelRequest(messages, [], turn=turn, step=step)):
            out.append(chunk)
    return out


async def test_a_text_call_is_served_as_it_was_chunked(tmp_path: Path) -> None:
    model = model_of("text_turn", tmp_path)
    # The recorded model's window, found as openai:test-model found it (in no table).
    assert model.name.startswith("replay:") and model.context_window is None
    assert model_of("text_turn", tmp_path, ACP_BRIDGE_CONTEXT_WINDOW="64000").context_window == 64000
    out = await served(model, [user("Hello, who are you?")], 1, 1)
    assert out == [ReasoningDelta("The user "), ReasoningDelta("greets me."), TextDelta("Hello"),
                   TextDelta(" there"), TextDelta("!"),
                   UsageChunk({"inputTokens": 12, "outputTokens": 9, "reasoningTokens": 4}), Finish("stop")]


async def test_tool_calls_with_their_arguments_then_the_results_are_checked(tmp_path: Path) -> None:
    model = model_of("tool_call_permission", tmp_path)
    prompt = user("Add a line to notes.txt, then delete it.")
    first = await served(model, [prompt], 1, 1)
    assert first == [TextDelta("Let me look."), ToolCallChunk("call_read", "read_file", '{"path": "notes.txt"}'),
                     UsageChunk({"inputTokens": 20, "outputTokens": 8}), Finish("tool_calls")]
    said: Message = {"role": "assistant", "content": [
        {"type": "text", "text": "Let me look."},
        {"type": "tool-call", "id": "call_read", "name": "read_file", "arguments": '{"path": "notes.txt"}'}]}

    def result(text: str) -> Message:
        return {"role": "tool", "callId": "call_read", "name": "read_file", "isError": False,
                "content": [{"type": "text", "text": text}]}

    second = await served(model, [prompt, said, result("one\n")], 1, 2)
    assert isinstance(second[0], ToolCallChunk) and second[-1] == Finish("tool_calls")
    differs = await served(model, [prompt, said, result("two\n")], 1, 2)
    assert len(differs) == 1 and differs[0].code == "replay_mismatch"
    assert "turn 1 step 2" in differs[0].message and "call_read" in differs[0].message
    assert "record the scenario again" in differs[0].message


def test_paths_under_the_cwd_may_differ_and_nothing_else() -> None:
    recorded = {"text": "Wrote <cwd>/a.txt; see <cwd>/b.txt"}
    assert same_up_to_cwd(recorded, {"text": "Wrote /tmp/x/work/a.txt; see /tmp/x/work/b.txt"}, "<cwd>")
    assert not same_up_to_cwd(recorded, {"text": "Wrote /tmp/x/a.txt; see /tmp/y/b.txt"}, "<cwd>")
    assert not same_up_to_cwd(recorded, {"text": "Wrote /tmp/x/work/a.txt; see /tmp/x/work/c.txt"}, "<cwd>")
    assert same_up_to_cwd({"n": 1}, {"n": 1}, "<cwd>") and not same_up_to_cwd({"n": 1}, {"n": 2}, "<cwd>")


async def test_paths_the_model_gave_under_the_recorded_cwd_are_moved_to_the_sessions(tmp_path: Path) -> None:
    source = tmp_path / "abs.jsonl"
    text = (RECORDED / "tool_call_permission" / "session.jsonl").read_text()
    source.write_text(text.replace('{\\"path\\": \\"notes.txt\\"}', '{\\"path\\": \\"<cwd>/notes.txt\\"}'))
    model = ReplayModel.from_source(str(source), env={})
    request = ModelRequest([user("Add a line to notes.txt, then delete it.")], [], turn=1, step=1, cwd="/tmp/live")
    out = [c async for c in model.stream(request)]
    assert ToolCallChunk("call_read", "read_file", '{"path": "/tmp/live/notes.txt"}') in out
    # With the session's cwd known, the recorded one stands for it and nothing else.
    assert same_up_to_cwd({"p": "<cwd>/a"}, {"p": "/tmp/live/a"}, "<cwd>", "/tmp/live")
    assert not same_up_to_cwd({"p": "<cwd>/a"}, {"p": "/tmp/other/a"}, "<cwd>", "/tmp/live")


async def test_a_recorded_error_is_raised_again_with_its_message_and_code(tmp_path: Path) -> None:
    model = model_of("error_finish", tmp_path)
    out = await served(model, [user("Read this very long prompt")], 1, 1)
    assert out == [Finish("error", message="the API rejected the request (400 Bad Request): This model's "
                          "maximum context length is 8 tokens", code="bad_request", retryable=False)]


async def test_a_cancelled_call_streams_what_it_had_then_hangs(tmp_path: Path) -> None:
    model = model_of("cancel", tmp_path)
    out = await served(model, [user("Count to ten, slowly.")], 1, 1, timeout=0.3)
    assert out == [TextDelta("Counting:"), TextDelta(" one,")]  # no Finish: cut off by the timeout


async def test_running_past_the_recording_fails_naming_turn_and_step(tmp_path: Path) -> None:
    model = model_of("text_turn", tmp_path)
    out = await served(model, [user("Hello, who are you?"), user("more?")], 2, 1)
    assert len(out) == 1 and out[0].reason == "error" and out[0].code == "replay_overrun"
    assert "turn 2 step 1" in out[0].message and "record the scenario again" in out[0].message
    assert "turns 1-1" in out[0].message


async def test_a_differing_prompt_fails_unless_the_check_is_loose(tmp_path: Path) -> None:
    out = await served(model_of("text_turn", tmp_path), [user("Something else")], 1, 1)
    assert out[0].code == "replay_mismatch" and "the prompt differs" in out[0].message
    assert "ACP_BRIDGE_REPLAY_CHECK=loose" in out[0].message
    loose = model_of("text_turn", tmp_path, ACP_BRIDGE_REPLAY_CHECK="loose")
    assert (await served(loose, [user("Something else")], 1, 1))[-1] == Finish("stop")
    with pytest.raises(ModelSpecError, match=r"strict .* or loose"):
        model_of("text_turn", tmp_path, ACP_BRIDGE_REPLAY_CHECK="maybe")


async def test_without_a_position_it_is_counted_in_the_transcript(tmp_path: Path) -> None:
    model = model_of("multi_turn", tmp_path)
    messages: list[Message] = [user("What is your name?"),
                               {"role": "assistant", "content": [{"type": "text", "text": "My name is Replay."}]},
                               user("What did I just ask?")]
    out = [c async for c in model.stream(ModelRequest(messages, []))]
    assert out[:2] == [TextDelta("You asked"), TextDelta(" my name.")]


# --- overrides ---------------------------------------------------------------------------


def with_overrides(tmp_path: Path, name: str, doc: Any) -> str:
    source = tmp_path / "session.jsonl"
    shutil.copyfile(RECORDED / name / "session.jsonl", source)
    (tmp_path / "session.overrides.json").write_bytes(orjson.dumps(doc))
    return str(source)


async def test_an_override_replaces_a_call_by_an_error_or_a_hang(tmp_path: Path) -> None:
    source = with_overrides(tmp_path, "multi_turn", {"overrides": [
        {"turn": 1, "step": 1, "error": {"message": "slow down", "code": "rate_limit", "retryable": True}},
        {"turn": 2, "step": 1, "hang": True, "keepChunks": True}]})
    model = load_model(f"replay:{source}")
    assert isinstance(model, ReplayModel)
    assert await served(model, [user("What is your name?")], 1, 1) == [
        Finish("error", message="slow down", code="rate_limit", retryable=True)]
    hung = await served(model, [user("What did I just ask?")], 2, 1, timeout=0.3)
    assert hung == [TextDelta("You asked"), TextDelta(" my name.")]
    assert (await served(model, [user("Which files are here?")], 3, 1))[-1] == Finish("tool_calls")


@pytest.mark.parametrize(("doc", "message"), [
    ({"overrides": [{"turn": 4, "step": 1, "hang": True}]},
     "entry 1 names turn 4 step 1, which the recording .* does not have \\(turns 1-3; turn 3 has 2 step"),
    ({"overrides": [{"turn": 3, "step": 3, "hang": True}]}, "names turn 3 step 3"),
    ({"overrides": [{"turn": 1, "step": 1}]}, 'entry 1: give exactly one of "error" and "hang"'),
    ({"overrides": [{"turn": 1, "step": 1, "hang": True, "delay": 3}]}, "entry 1: unknown fields \\['delay'\\]"),
    ({"overrides": [{"turn": 1, "step": 1, "error": {"code": "x"}}]}, "error must be \\{message"),
    ({"overrides": [{"turn": 0, "step": 1, "hang": True}]}, "turn must be an integer from 1"),
    ({"overrides": [{"turn": 1, "step": 1, "hang": True}, {"turn": 1, "step": 1, "hang": True}]},
     "entry 2: turn 1 step 1 is overridden twice"),
    ([], 'expected \\{"overrides"'),
])
def test_a_bad_override_is_refused_naming_the_entry(tmp_path: Path, doc: Any, message: str) -> None:
    with pytest.raises(ModelSpecError, match=message):
        load_model(f"replay:{with_overrides(tmp_path, 'multi_turn', doc)}")


def test_overrides_named_by_the_environment_must_exist(tmp_path: Path) -> None:
    source = tmp_path / "r.jsonl"
    shutil.copyfile(RECORDED / "text_turn" / "session.jsonl", source)
    with pytest.raises(ModelSpecError, match="cannot read it"):
        ReplayModel.from_source(str(source), env={"ACP_BRIDGE_REPLAY_OVERRIDES": str(tmp_path / "none.json")})


# --- bad recordings: the rules of session/load ----------------------------------------------


def recording_lines(name: str = "multi_turn") -> list[bytes]:
    return (RECORDED / name / "session.jsonl").read_bytes().splitlines(keepends=True)


def write(tmp_path: Path, lines: list[bytes]) -> str:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"".join(lines))
    return f"replay:{path}"


def test_another_format_version_is_refused(tmp_path: Path) -> None:
    lines = recording_lines()
    header = orjson.loads(lines[0])
    lines[0] = orjson.dumps({**header, "version": 1}) + b"\n"
    with pytest.raises(ModelSpecError, match="stored at format version 1; this build reads only version 0"):
        load_model(write(tmp_path, lines))


def test_a_torn_tail_is_cut_as_load_cuts_it(tmp_path: Path) -> None:
    lines = [*recording_lines(), b'{"type":"turn/start","seq":99,"ti']  # a write cut short
    model = load_model(write(tmp_path, lines))
    assert isinstance(model, ReplayModel) and model.recording.torn_records == 1
    assert model.recording.steps == {1: 1, 2: 1, 3: 2}


def test_damage_before_the_last_turn_end_is_refused_saying_where(tmp_path: Path) -> None:
    lines = recording_lines()
    lines[3] = b"{not json\n"
    with pytest.raises(ModelSpecError, match=r"is damaged at offset \d+, line 4: not valid JSON"):
        load_model(write(tmp_path, lines))


def test_a_log_that_breaks_the_invariants_is_refused(tmp_path: Path) -> None:
    lines = recording_lines()
    event = orjson.loads(lines[3])  # the first step/start
    assert event["type"] == "step/start"
    event["data"]["step"] = 2
    lines[3] = orjson.dumps(event) + b"\n"
    with pytest.raises(ModelSpecError, match=r"breaks the log invariants at seq 2, offset \d+, line 4: .*step must be 1"):
        load_model(write(tmp_path, lines))


async def test_a_crashed_last_turn_is_repaired_in_memory_and_its_call_hangs(tmp_path: Path) -> None:
    lines = recording_lines("text_turn")
    cut = next(i for i, line in enumerate(lines) if b'"assistant/message"' in line)
    source = write(tmp_path, lines[:cut])  # the agent died mid-stream
    before = (tmp_path / "bad.jsonl").read_bytes()
    model = load_model(source)
    assert isinstance(model, ReplayModel) and model.recording.closers == 2  # step/end, turn/end
    assert (tmp_path / "bad.jsonl").read_bytes() == before  # nothing written back
    out = await served(model, [user("Hello, who are you?")], 1, 1, timeout=0.3)
    assert out[-1] == TextDelta("!")


def test_a_session_id_is_read_from_the_store(tmp_path: Path) -> None:
    lines = recording_lines("text_turn")
    sid = orjson.loads(lines[0])["id"]
    (tmp_path / "store" / "sessions").mkdir(parents=True)
    shutil.copyfile(RECORDED / "text_turn" / "session.jsonl", tmp_path / "store" / "sessions" / f"{sid}.jsonl")
    model = load_model(f"replay:{sid}", store_dir=tmp_path / "store")
    assert isinstance(model, ReplayModel) and model.recording.header["id"] == sid
    with pytest.raises(ModelSpecError, match="not found"):
        load_model("replay:00000000-0000-4000-8000-000000000000", store_dir=tmp_path / "store")
    with pytest.raises(ModelSpecError, match="no such session log file, and not a session id"):
        load_model(f"replay:{tmp_path / 'missing.jsonl'}")


def test_a_wrapped_session_is_not_served_as_a_model(tmp_path: Path) -> None:
    lines = recording_lines("text_turn")
    header = orjson.loads(lines[0])
    lines[0] = orjson.dumps({**header, "wrapped": {"command": ["some-agent"], "sessionId": "s1"}}) + b"\n"
    with pytest.raises(ModelSpecError, match="wrapped agent's session"):
        load_model(write(tmp_path, lines))


@pytest.mark.parametrize(("source", "says"), [
    ("none.jsonl", "replay:{tmp}/none.jsonl: no such session log file, and not a session id"),
    ("00000000-0000-4000-8000-000000000000",  # a session id: looked up in the agent's store
     "replay:00000000-0000-4000-8000-000000000000: session 00000000-0000-4000-8000-000000000000 not found"),
])
@pytest.mark.integration
def test_the_agent_refuses_a_bad_recording_at_start_up(tmp_path: Path, source: str, says: str) -> None:
    spec = f"replay:{tmp_path / source}" if source.endswith(".jsonl") else f"replay:{source}"
    proc = subprocess.run([sys.executable, "-m", "acp_bridge", "--store", str(tmp_path / "store"), "--model", spec],
                          input=b"", capture_output=True, timeout=30, check=False)
    assert proc.returncode == 2 and proc.stdout == b""
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("acp-bridge: --model: ")
    assert says.format(tmp=tmp_path) in lines[0]


@pytest.mark.integration
def test_replay_and_the_harness_stay_off_the_start_up_path() -> None:
    # The agent's start-up imports neither; a replay of an openai: recording needs no httpx.
    lean = ("import sys, acp_bridge.cli.main, acp_bridge.agent.serve, acp_bridge.models; "
            "sys.exit(sorted(m for m in sys.modules if m.startswith(('acp_bridge.snapshot', "
            "'acp_bridge.models.replay', 'acp_bridge.models.recording', 'httpx'))) or None)")
    subprocess.run([sys.executable, "-c", lean], check=True)
    replayed = ("import sys; from acp_bridge.models import load_model; "
                f"m = load_model('replay:{RECORDED / 'text_turn' / 'session.jsonl'}'); "
                "sys.exit('httpx' in sys.modules)")
    subprocess.run([sys.executable, "-c", replayed], check=True)


async def test_a_compactions_summary_call_is_served_as_recorded(tmp_path: Path) -> None:
    store = SessionStore(JsonlBackend(tmp_path / "store"))
    log = store.create(cwd=str(tmp_path))
    summary_usage = {"inputTokens": 900, "outputTokens": 12}
    script = Script().text_turn("one", "uno").text_turn("two", "dos")
    script.start_turn("three").start_step().compaction("t3s1-compaction", to_turn=2)
    script.compaction("t3s1-compaction", "completed", to_turn=2, summary=[{"type": "text", "text": "Two turns."}],
                      usage=summary_usage)
    script.chunk("tres").message("tres").end_step().end_turn()
    script.start_turn("four").start_step().compaction("t4s1-compaction", to_turn=3)
    script.compaction("t4s1-compaction", "failed", to_turn=3, error="The summary could not be made: rate limited.")
    script.chunk("cuatro").message("cuatro").end_step().end_turn()
    write_log(log, script)
    log.close()
    model = ReplayModel.from_source(log.id, store_dir=tmp_path / "store")
    store.close()

    async def summarized(turn: int, step: int) -> list[Any]:
        request = ModelRequest([user("anything")], [], turn=turn, step=step, purpose="compaction")
        return [chunk async for chunk in model.stream(request)]

    assert await summarized(3, 1) == [TextDelta("Two turns."), UsageChunk(summary_usage), Finish("stop")]  # type: ignore[arg-type]
    assert await summarized(4, 1) == [Finish("error", message="rate limited")]
    [overrun] = await summarized(2, 1)
    assert isinstance(overrun, Finish) and overrun.code == "replay_overrun"
    assert "no compaction at turn 2 step 1" in (overrun.message or "")
    # The steps' own calls are served as before, the compaction beside them.
    assert [c for c in await served(model, [user("three")], 3, 1) if isinstance(c, TextDelta)] == [TextDelta("tres")]
