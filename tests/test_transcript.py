"""`derive_messages` as a table: a log in, the exact provider transcript out."""

from __future__ import annotations

from typing import Any

import pytest

from session import derive_messages
from session.transcript import (
    BYTES_PER_TOKEN,
    DEFAULT_HISTORY_TOKENS,
    MEDIA_TOKENS,
    MESSAGE_TOKENS,
    SUMMARY_INTRO,
    Transcript,
    content_tokens,
    history_budget,
    unanswered_calls,
)
from tests.support.logs import Script, closers_of, events_of, sized_turns


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def summary(text: str) -> dict[str, Any]:
    """The message that stands for compacted turns."""
    return {"role": "user", "content": [{"type": "text", "text": SUMMARY_INTRO}, {"type": "text", "text": text}]}


def call_block(call_id: str) -> dict[str, Any]:
    return {"type": "tool-call", "id": call_id, "name": "read_file",
            "arguments": f'{{"path":"{call_id}.txt"}}'}


def tool(call_id: str, text: str = "contents", error: bool = False) -> dict[str, Any]:
    return {"role": "tool", "callId": call_id, "name": "read_file",
            "content": [{"type": "text", "text": text}], "isError": error}


CASES: list[tuple[str, Script, list[dict[str, Any]]]] = [
    ("empty", Script(), []),
    ("text turn: chunks and boundaries skipped", Script().text_turn("hi", "hello back"),
     [user("hi"), {"role": "assistant", "content": [{"type": "text", "text": "hello back"}]}]),
    ("usage-only message skipped",
     Script().start_turn("q").start_step().message("", usage=True).end_step().end_turn("max_tokens"),
     [user("q")]),
    ("tool calls and results in order, tool/call skipped",
     Script().start_turn("read").start_step().message("reading", calls=("a", "b"))
     .call("a").result("a", "A").call("b").result("b", "B", error=True).end_step()
     .start_step().message("done").end_step().end_turn(),
     [user("read"),
      {"role": "assistant", "content": [{"type": "text", "text": "reading"}, call_block("a"), call_block("b")]},
      tool("a", "A"), tool("b", "B", error=True),
      {"role": "assistant", "content": [{"type": "text", "text": "done"}]}]),
    ("two turns",
     Script().text_turn("one", "uno").text_turn("two", "dos"),
     [user("one"), {"role": "assistant", "content": [{"type": "text", "text": "uno"}]},
      user("two"), {"role": "assistant", "content": [{"type": "text", "text": "dos"}]}]),
    # A completed compaction: the turns it replaces are its summary from then on.
    ("a compaction replaces the turns before it by its summary",
     Script().text_turn("one", "uno").text_turn("two", "dos").compacted_turn("S12", "three", "tres"),
     [summary("S12"), user("three"), answer("tres")]),
    ("the turns after the range stay",
     Script().text_turn("one", "uno").text_turn("two", "dos").compacted_turn("S1", "three", "tres", to_turn=1),
     [summary("S1"), user("two"), answer("dos"), user("three"), answer("tres")]),
    ("a second compaction replaces the first summary with the turns",
     Script().text_turn("one", "uno").compacted_turn("S1", "two", "dos").text_turn("three", "tres")
     .compacted_turn("S123", "four", "cuatro", from_turn=2),
     [summary("S123"), user("four"), answer("cuatro")]),
    ("a compaction that failed changes nothing",
     Script().text_turn("one", "uno").start_turn("two").start_step().compaction().compaction(
         status="failed", error="no").message("dos").end_step().end_turn(),
     [user("one"), answer("uno"), user("two"), answer("dos")]),
    ("a compaction completed without a summary changes nothing (nothing stands for the turns)",
     Script().text_turn("one", "uno").start_turn("two").start_step().compaction(status="completed")
     .message("dos").end_step().end_turn(),
     [user("one"), answer("uno"), user("two"), answer("dos")]),
    ("a compaction that replaces nothing still stands for what the agent forgot",
     Script().start_turn("one").start_step().compaction(to_turn=0, status="completed",
                                                          summary=[{"type": "text", "text": "S0"}])
     .message("uno").end_step().end_turn(),
     [summary("S0"), user("one"), answer("uno")]),
]


@pytest.mark.parametrize(("name", "script", "expected"), CASES, ids=[c[0] for c in CASES])
def test_derive_messages(name: str, script: Script, expected: list[dict[str, Any]]) -> None:
    assert derive_messages(events_of(script)) == expected


def test_prompt_blocks_are_kept_verbatim() -> None:
    blocks = [{"type": "text", "text": "see"},
              {"type": "resource_link", "uri": "file:///a.py", "name": "a.py"},
              {"type": "resource", "resource": {"uri": "file:///b.py", "text": "x = 1"}}]
    script = Script().add("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}})
    script.add("user/message", {"turn": 1, "content": blocks})
    assert derive_messages(events_of(script)) == [{"role": "user", "content": blocks}]


def test_interrupted_calls_are_answered_after_repair() -> None:
    events = events_of(Script().start_turn("go").start_step().message("m", calls=("a", "b")).call("a"))
    assert unanswered_calls(derive_messages(events)) == ["a", "b"]
    repaired = events + closers_of(events)
    messages = derive_messages(repaired)
    assert unanswered_calls(messages) == []
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert all(m["isError"] for m in messages if m["role"] == "tool")


def _tool_turn(script: Script, n: int, size: int) -> Script:
    call = f"c{n}"
    return (script.start_turn(f"turn {n}").start_step().message("reading", calls=(call,))
            .call(call).result(call, "x" * size).end_step()
            .start_step().message(f"done {n}").end_step().end_turn())


def _measures(script: Script) -> list[tuple[str, int, int]]:
    transcript = Transcript()
    transcript.feed_all(events_of(script))
    return [(m["role"], e, g) for m, e, g in zip(transcript.messages, transcript.exact, transcript.guess, strict=True)]


def _answer(text: str, usage: dict[str, int] | None, *blocks: dict[str, Any]) -> Script:
    script = Script().start_turn("q").start_step()
    data: dict[str, Any] = {"turn": 1, "step": 1, "content": [*blocks, {"type": "text", "text": text}]}
    if usage is not None:
        data["usage"] = usage
    return script.add("assistant/message", data)


TEXT_TOKENS = -(-len(b'{"type":"text","text":"q"}') // BYTES_PER_TOKEN) + MESSAGE_TOKENS
MEASURES: list[tuple[str, Script, tuple[str, int, int]]] = [
    # (what, a log, the last message's (role, the provider's count, the estimate))
    ("a prompt is estimated from its bytes", Script().start_turn("q"), ("user", 0, TEXT_TOKENS)),
    ("an answer the provider counted: its outputTokens", _answer("x" * 3000, {"inputTokens": 50, "outputTokens": 700}),
     ("assistant", 700 + MESSAGE_TOKENS, 0)),
    ("reasoning is not sent back: its reasoningTokens are not counted",
     _answer("x", {"inputTokens": 50, "outputTokens": 700, "reasoningTokens": 650},
             {"type": "reasoning", "text": "hm"}), ("assistant", 50 + MESSAGE_TOKENS, 0)),
    ("reasoning not counted apart: its blocks estimated and taken off",
     _answer("x", {"inputTokens": 50, "outputTokens": 700}, {"type": "reasoning", "text": "r" * 300}),
     ("assistant", 600 + MESSAGE_TOKENS, 0)),
    ("no count (a server that sends no usage): estimated",
     _answer("x" * 3000, None), ("assistant", 0, 1000 + 9 + MESSAGE_TOKENS)),
    ("a count of 0 is no count", _answer("x" * 3000, {"inputTokens": 0, "outputTokens": 0}),
     ("assistant", 0, 1000 + 9 + MESSAGE_TOKENS)),
    ("an image costs MEDIA_TOKENS, not its base64",
     Script().add("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}}).add(
         "user/message", {"turn": 1, "content": [{"type": "image", "mimeType": "image/png", "data": "A" * 300_000}]}),
     ("user", 0, MEDIA_TOKENS + MESSAGE_TOKENS)),
]


@pytest.mark.parametrize(("what", "script", "last"), MEASURES, ids=[m[0] for m in MEASURES])
def test_each_message_is_measured_in_tokens(what: str, script: Script, last: tuple[str, int, int]) -> None:
    assert _measures(script)[-1] == last


def test_a_tool_result_is_estimated_from_its_bytes() -> None:
    measures = _measures(_tool_turn(Script(), 0, 3000))
    role, exact, guess = measures[2]
    assert (role, exact) == ("tool", 0) and 1000 + MESSAGE_TOKENS < guess < 1020 + MESSAGE_TOKENS


PROMPT_TOKENS = -(-len(b'{"type":"text","text":"p1"}') // BYTES_PER_TOKEN) + MESSAGE_TOKENS
FITS: list[tuple[str, tuple[int, ...], float, float, int, int]] = [
    # (what, answers' counts, limit, scale, after, the first turn shown)
    ("everything fits", (100, 100, 100), 10_000, 1.0, -1, 1),
    ("the oldest turn left out", (1_000, 100, 100), 1_000, 1.0, -1, 2),
    ("one huge answer, then small turns: only what follows it", (100, 8_090, 50, 50), 1_000, 1.0, -1, 3),
    ("nothing fits: the last turn still is shown", (100, 100, 5_000), 1_000, 1.0, -1, 3),
    ("the estimates count `scale` times: the prompts no longer fit", (100, 100, 100),
     3 * (100 + MESSAGE_TOKENS) + 3 * PROMPT_TOKENS, 1.5, -1, 2),
    ("after a refused request: fewer turns than it had", (100, 100, 100), 10_000, 1.0, 0, 2),
    ("after a refused request that had only the last turn: the last turn", (100, 100, 100), 10_000, 1.0, 4, 3),
]


@pytest.mark.parametrize(("what", "answers", "limit", "scale", "after", "first"), FITS, ids=[f[0] for f in FITS])
def test_fit_shows_the_newest_whole_turns_within_the_limit(what: str, answers: tuple[int, ...], limit: float,
                                                           scale: float, after: int, first: int) -> None:
    transcript = sized_turns(*answers)
    start = transcript.fit(limit, scale, after=after)
    assert transcript.messages[start] == user(f"p{first}")
    assert transcript.tokens(start, scale) <= limit or first == len(answers)


def test_tokens_sum_the_counts_and_the_scaled_estimates() -> None:
    transcript = sized_turns(100, 200)
    assert transcript.tokens() == 300 + 2 * MESSAGE_TOKENS + 2 * PROMPT_TOKENS
    assert transcript.tokens(2, 2.0) == 200 + MESSAGE_TOKENS + 2 * PROMPT_TOKENS


@pytest.mark.parametrize(("budget", "kept_turns"), [
    (None, 10),  # no budget: everything, as derive_messages
    (10 ** 9, 10),  # a budget never reached
    (1_000, 3),  # about 385 tokens per turn: two and the next prompt fit, then its turn
    (100, 1),  # smaller than one turn: the last turn still stays
])
def test_budget_drops_oldest_whole_turns(budget: int | None, kept_turns: int) -> None:
    script = Script()
    for n in range(10):
        _tool_turn(script, n, 1000)
    events = events_of(script)
    transcript = Transcript(budget=budget)
    transcript.feed_all(events)
    full = derive_messages(events)
    per_turn = len(full) // 10
    assert transcript.messages == full[len(full) - kept_turns * per_turn:]
    assert transcript.dropped == len(full) - kept_turns * per_turn
    assert transcript.messages[0]["role"] == "user"
    assert unanswered_calls(transcript.messages) == []
    assert len(transcript.exact) == len(transcript.guess) == len(transcript.messages)


def test_history_budget_follows_the_context_window() -> None:
    assert history_budget(100_000) == 200_000  # tokens: twice the window
    assert history_budget(None) == history_budget(0) == DEFAULT_HISTORY_TOKENS


def test_a_summary_is_the_head_fit_leaves_out_first_and_is_measured() -> None:
    script = Script().text_turn("one", "uno").compacted_turn("S" * 300, "two", "dos").text_turn("three", "tres")
    transcript = Transcript()
    transcript.feed_all(events_of(script))
    assert transcript.head == 1
    assert transcript.turn_starts() == [(1, 2), (3, 3)]
    assert transcript.exact[0] == 0
    assert transcript.guess[0] == content_tokens(transcript.messages[0]["content"]) + MESSAGE_TOKENS
    # Not a turn: a limit that holds the turns but not the summary leaves it out first.
    assert transcript.fit(transcript.tokens(1)) == 1
    assert transcript.fit(transcript.tokens()) == 0


def test_a_compaction_of_turns_the_budget_already_dropped_still_stands_for_them() -> None:
    script = Script()
    for n in range(6):
        _tool_turn(script, n, 1000)
    script.compacted_turn("S", to_turn=6, from_turn=5)  # what the summarizer was shown
    transcript = Transcript(budget=1_000)  # two turns kept in memory at most
    transcript.feed_all(events_of(script))
    assert transcript.messages[0] == summary("S")
    assert transcript.turn_starts() == [(1, 7)]
    assert transcript.messages == derive_messages(events_of(script))


def test_a_rolled_back_turn_forgets_its_number() -> None:
    transcript = Transcript()
    transcript.feed_all(events_of(Script().text_turn("one").text_turn("two")))
    transcript.truncate(2)
    assert transcript.turn_starts() == [(0, 1)]
