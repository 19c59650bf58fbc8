"""What a model call is shown (acp_bridge.agent.context), as tables: the room kept for
the answer, the turns chosen for a window, the scale the provider's counts give the
estimates, and what is sent instead of a request refused as too long. The context-length
errors of OpenAI, llama.cpp, vLLM, Ollama and Anthropic-style servers, recognised with
the numbers they give."""

from __future__ import annotations

import orjson
import pytest

from acp_bridge.agent.context import (
    ANSWER_ROOM_MAX,
    REQUEST_TOKENS,
    SCALE_MAX,
    Context,
    Shown,
    answer_room,
    request_overhead,
)
from acp_bridge.models.base import CONTEXT_LENGTH, Finish
from acp_bridge.models.openai_errors import context_error, http_error, stream_error
from session.transcript import BYTES_PER_TOKEN, MESSAGE_TOKENS, Transcript
from tests.support.logs import sized_turns as turns

TOOLS = [{"name": "read_file", "description": "Read a file.", "parameters": {"type": "object"}}]
OVERHEAD = REQUEST_TOKENS + -(-len(orjson.dumps(TOOLS)) // BYTES_PER_TOKEN)


def first_turn(transcript: Transcript, shown: Shown) -> int:
    """The number of the first turn `shown` shows (its prompt is "p<n>")."""
    block: dict[str, str] = transcript.messages[shown.start]["content"][0]  # type: ignore[assignment]
    return int(block["text"][1:])


@pytest.mark.parametrize(("window", "room"), [
    (8_192, 2_048), (4_096, 1_024), (128_000, 32_000), (1_047_576, ANSWER_ROOM_MAX), (400_000, ANSWER_ROOM_MAX),
])
def test_a_quarter_of_the_window_is_kept_for_the_answer(window: int, room: int) -> None:
    assert answer_room(window) == room


def test_the_request_overhead_is_the_tools_and_the_system_message() -> None:
    assert request_overhead(TOOLS) == OVERHEAD
    assert request_overhead([]) == REQUEST_TOKENS + 1  # "[]"


CHOICES: list[tuple[str, tuple[int, ...], int, float, int]] = [
    # (what, answers' counts, window, scale, the first turn shown)
    ("a big window shows everything", (1_000, 1_000, 1_000), 128_000, 1.0, 1),
    ("the issue's case: one 8,090-token answer in an 8,192 window, then small turns", (8_090, 20, 20), 8_192, 1.0, 2),
    ("turns up to the window less the answer's room and the overhead", (2_000, 2_000, 2_000), 8_192, 1.0, 2),
    ("the running turn is shown even when it alone is too long", (100, 9_000), 8_192, 1.0, 2),
]


@pytest.mark.parametrize(("what", "answers", "window", "scale", "first"), CHOICES, ids=[c[0] for c in CHOICES])
def test_choose(what: str, answers: tuple[int, ...], window: int, scale: float, first: int) -> None:
    transcript = turns(*answers)
    context = Context(scale=scale)
    shown = context.choose(transcript, window, TOOLS)
    assert first_turn(transcript, shown) == first
    assert shown.limit == window - answer_room(window) - OVERHEAD * scale
    assert shown.exact == sum(transcript.exact[shown.start:])
    assert shown.guess == sum(transcript.guess[shown.start:]) + OVERHEAD
    if first > 1:  # it fits, unless only the last turn is left
        assert transcript.tokens(shown.start, scale) <= shown.limit or first == len(answers)


def test_a_scale_above_1_shows_fewer_turns() -> None:
    transcript = turns(10, 10, 10)
    # The smallest window that shows all three turns with the estimates as they are.
    window = next(w for w in range(1_000, 10_000) if Context().choose(transcript, w, TOOLS).start == 0)
    scaled = Context(scale=3.0).choose(transcript, window, TOOLS)
    assert first_turn(transcript, scaled) > 1


@pytest.mark.parametrize(("counted", "scale"), [
    (None, 1.0),  # no usage: nothing learned
    (0, 1.0),  # a count of 0 says nothing
    (1_000 + 2 * 500, 2.0),  # the estimated part cost twice its estimate
    (1_000 + 250, 0.5),
    (1_000 + 500 * 100, SCALE_MAX),  # never trusted beyond SCALE_MAX
    (10, 1 / SCALE_MAX),  # nor below its inverse (fewer than the counted messages: a server's oddity)
])
def test_what_a_call_was_counted_scales_the_estimates(counted: int | None, scale: float) -> None:
    context = Context()
    usage = None if counted is None else {"inputTokens": counted, "outputTokens": 5}
    context.measured(Shown(start=0, exact=1_000, guess=500, limit=0), usage)  # type: ignore[arg-type]
    assert context.scale == scale


def test_a_refusal_shows_fewer_turns_sized_by_the_servers_numbers() -> None:
    transcript = turns(1_000, 1_000, 1_000, 1_000)
    context = Context()
    # Shown everything, estimated to fit a 16k window; the server's window is 4,096.
    refused = context.choose(transcript, 16_384, TOOLS)
    assert refused.start == 0
    finish = Finish("error", "too long", CONTEXT_LENGTH, False, request_tokens=refused.exact + 2 * refused.guess,
                    context_tokens=4_096)
    fewer = context.retry(transcript, "openai:m", 16_384, TOOLS, refused, finish)
    assert fewer is not None and fewer.start > refused.start
    assert context.windows == {"openai:m": 4_096}  # kept: the next calls use it
    assert context.window("openai:m", 16_384) == 4_096
    assert context.scale == pytest.approx(2.0)  # what the server counted of the estimates
    limit = 4_096 - answer_room(4_096) - OVERHEAD * 2.0
    assert fewer.limit == limit
    assert transcript.tokens(fewer.start, 2.0) <= limit < transcript.tokens(fewer.start - 3, 2.0)
    assert first_turn(transcript, fewer) == 3


def test_a_refusal_without_numbers_bounds_the_window_by_what_was_refused() -> None:
    transcript = turns(*[2_000] * 10)  # 20,000 tokens of history, the window unknown (128k assumed)
    context = Context()
    refused = context.choose(transcript, 128_000, TOOLS)
    assert refused.start == 0
    too_long = Finish("error", "too long", CONTEXT_LENGTH)
    fewer = context.retry(transcript, "m", 128_000, TOOLS, refused, too_long)
    measured = refused.exact + refused.guess
    assert context.windows == {"m": measured} and context.scale == 1.0
    # A quarter of it kept for the answer: far fewer turns than one a try.
    assert fewer is not None and transcript.tokens(fewer.start) <= measured * 3 / 4
    assert first_turn(transcript, fewer) == 4
    again = context.retry(transcript, "m", context.window("m", None), TOOLS, fewer, too_long)
    assert again is not None and first_turn(transcript, again) > first_turn(transcript, fewer)
    assert context.windows["m"] < measured


def test_a_refusal_without_numbers_still_drops_a_turn() -> None:
    transcript = turns(10, 10, 10)
    context = Context()
    refused = context.choose(transcript, 8_192, TOOLS)
    fewer = context.retry(transcript, "m", 8_192, TOOLS, refused, Finish("error", "too long", CONTEXT_LENGTH))
    assert fewer is not None and first_turn(transcript, fewer) > 1


def test_a_refusal_of_the_running_turn_alone_has_nothing_less_to_show() -> None:
    transcript = turns(10, 10, 10)
    refused = Shown(start=transcript.fit(0), exact=0, guess=0, limit=0)
    assert first_turn(transcript, refused) == 3
    finish = Finish("error", "too long", CONTEXT_LENGTH, False, 9_000, 8_192)
    assert Context().retry(transcript, "m", 8_192, TOOLS, refused, finish) is None


def test_unknown_windows_are_the_default() -> None:
    context = Context()
    assert context.window("openai:local", None) == 128_000
    assert context.window("openai:local", 32_768) == 32_768


# --- the providers' words --------------------------------------------------------------------

ERRORS: list[tuple[str, str, dict[str, object] | None, tuple[int | None, int | None]]] = [
    ("llama.cpp", "request (8233 tokens) exceeds the available context size (8192 tokens), try increasing it",
     {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 8233, "n_ctx": 8192}, (8233, 8192)),
    ("llama.cpp, numbers in the message only",
     "request (8233 tokens) exceeds the available context size (8192 tokens), try increasing it", None,
     (8233, 8192)),
    ("llama.cpp without a context shift", "input (9000 tokens) is larger than the max context size (8192 tokens). "
     "skipping", None, (9000, 8192)),
    ("OpenAI", "This model's maximum context length is 8192 tokens. However, your messages resulted in 8233 "
     "tokens. Please reduce the length of the messages.",
     {"type": "invalid_request_error", "code": "context_length_exceeded"}, (8233, 8192)),
    ("OpenAI, newer wording", "Your input exceeds the context window of this model. Please adjust your input and "
     "try again.", {"type": "invalid_request_error", "code": "context_length_exceeded"}, (None, None)),
    ("vLLM", "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the "
     "messages, 1000 in the completion). Please reduce the length of the messages or completion.",
     {"type": "BadRequestError"}, (4000, 4096)),
    ("Ollama", "the input length exceeds the context length", None, (None, None)),
    ("Anthropic-style router", "prompt is too long: 210000 tokens > 200000 maximum", None, (210000, 200000)),
    ("a code alone", "invalid request", {"code": "context_length_exceeded"}, (None, None)),
]


@pytest.mark.parametrize(("who", "message", "error", "numbers"), ERRORS, ids=[e[0] for e in ERRORS])
def test_context_length_errors_are_recognised(who: str, message: str, error: dict[str, object] | None,
                                              numbers: tuple[int | None, int | None]) -> None:
    finish = context_error(message, error)
    assert finish is not None
    assert (finish.reason, finish.code, finish.retryable) == ("error", CONTEXT_LENGTH, False)
    assert (finish.request_tokens, finish.context_tokens) == numbers
    assert message.rstrip(". ") in (finish.message or "")
    # The same error as an HTTP answer, and inside a stream (servers do both).
    body = orjson.dumps({"error": {"message": message, **(error or {})}})
    failed = http_error(400, "Bad Request", {}, body, model="m", url="u", has_key=True)
    assert failed.finish == finish and failed.retry_after is None
    assert stream_error({"message": message, **(error or {})}) == finish


@pytest.mark.parametrize("message", [
    "Incorrect API key provided", "The model `gpt-9` does not exist", "Invalid 'messages[2].content'",
    "max_tokens must be at least 1",
])
def test_other_errors_are_not_context_length_errors(message: str) -> None:
    assert context_error(message) is None
    failed = http_error(400, "Bad Request", {}, orjson.dumps({"error": {"message": message}}), model="m",
                        url="u", has_key=True)
    assert failed.finish.code == "bad_request"


def test_a_message_is_estimated_with_its_framing() -> None:
    transcript = turns(5)
    assert transcript.exact[1] == 5 + MESSAGE_TOKENS
