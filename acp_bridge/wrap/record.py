"""`TurnRecorder`: the ACP traffic of one wrapped turn in, session-log items out (docs/wrap.md).

Pure: the proxy feeds it what passes between the editor and the wrapped agent and
appends the `(event type, data)` items it returns, in order; it never does I/O. Every
item sequence it returns keeps the log's invariants, whatever the agent sends.

Two things are recorded of every turn (docs/wrap.md, "Recording"):

- what the editor was sent, each update once and at once (log before send), so that a
  replay sends exactly that again: a text chunk as `assistant/chunk` (with `sent`, the
  fields of the update its chunk does not hold), every other update as it came in a
  `wrapped/update`;
- what the agent said, for the transcript (`sessions show`, `--seed-fresh`, a model
  reading the log): the step's `assistant/message`, each call's `tool/call` and
  `tool/result`, the turn's usage, all `silent` (the editor was sent nothing for them:
  their updates are the ones above). They are written when the step closes, not when
  a call is announced: an agent announces a call, then tells its arguments, a better
  title and its outcome in later updates, and the log keeps what it said last; but
  before a request of the agent reaches the editor (`asking`), so that what it lets
  run has its call on disk (acp_bridge/wrap/calls.py).

Steps, the turn's usage and unfinished calls: docs/wrap.md, "How a turn is recorded".
How the agent's answer to the prompt (or its error) is read as the turn's end reason
and usage: acp_bridge/wrap/prompt_answers.py.
"""

from __future__ import annotations

from typing import Any, Final

from acp_bridge.wrap.calls import AnnouncedCall, Step, step_items
from acp_bridge.wrap.compactions import ChildCompactions
from acp_bridge.wrap.prompt_answers import added_usage, answer_end, error_end
from session.closers import OpenTurn, Unanswered, Unreported, closers
from session.events import (
    CANCELLED_BY,
    CONTEXT_COMPACTION,
    JSON,
    TOOL_RESULT,
    PermissionRecord,
    Reason,
    Usage,
    reason,
)
from session.items import (
    ChunkKind,
    Item,
    assistant_chunk,
    assistant_message,
    step_end,
    step_start,
    turn_start,
    user_message,
    wrapped_update,
)

_CHUNKS: Final[dict[str, ChunkKind]] = {"agent_message_chunk": "text", "agent_thought_chunk": "reasoning"}

# A chunk of the open step (`TurnRecorder.streamed`): its step, kind, text and `sent`,
# the arguments of `SessionLog.append_chunk` after the turn. A plain tuple: one is made
# for most updates of a stream.
StreamedChunk = tuple[int, ChunkKind, str, "dict[str, Any] | None"]


class TurnRecorder:
    """One turn of a wrapped agent. `prompt` starts it; `answer`, `failed` or
    `cancelled` ends it (the first of them: later ends record nothing); `update` and
    `permission` may come at any time. `agent` is recorded as `turn/start.model` (what
    served the turn), `mode` as its mode, `name` (its `wrap --agent` name, if any) as
    `turn/start.agent`."""

    def __init__(self, turn: int, *, agent: str, mode: str | None = None, name: str | None = None) -> None:
        self.turn = turn
        self.agent = agent
        self.mode = mode
        self.name = name
        self._started = False
        self._ended = False
        self._step: Step | None = None  # the open step
        self._steps = 0
        self._calls: dict[str, AnnouncedCall] = {}
        self._meta_usage: Usage | None = None  # the sum of the updates' `_meta.usage`
        self._compactions = ChildCompactions(turn)  # its compactions (acp_bridge.wrap.compactions)

    @property
    def open(self) -> bool:
        """The turn started and its `turn/end` was not produced yet."""
        return self._started and not self._ended

    def prompt(self, content: list[Any], trigger: dict[str, Any] | None = None) -> list[Item]:
        """`turn/start` and the prompt; `trigger` (default: a prompt) is a wrapper's own
        command's (acp_bridge.wrap.commands), whose turn the child is not sent."""
        if self._started:
            raise RuntimeError(f"turn {self.turn} was already prompted")
        self._started = True
        return [turn_start(self.turn, trigger=trigger or {"kind": "prompt"}, mode=self.mode, model=self.agent,
                           agent=self.name),
                user_message(self.turn, content)]

    def update(self, update: dict[str, Any]) -> list[Item]:
        """The items for one `session/update` of the wrapped agent (its `update`)."""
        if not isinstance(update, dict) or not isinstance(update.get("sessionUpdate"), str):
            return []  # not a SessionUpdate: nothing the log could hold or a replay show
        if not self.open:
            return [wrapped_update(update)]
        kind = update["sessionUpdate"]
        chunk = _CHUNKS.get(kind)
        if chunk is not None:
            content = update.get("content")
            if isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str):
                return self._chunk(chunk, content["text"], update)
        elif kind in ("tool_call", "tool_call_update"):
            return self._call_update(update)
        elif kind == "compaction_update" and ChildCompactions.usable(update):
            items: list[Item] = []
            step = self._model_step(items)  # a compaction is a model call of its own
            return [*items, self._compactions.update(update, step.number)]
        elif kind == "compaction_summary_chunk":
            self._compactions.chunk(update)
        # Anything else (a `usage_update` too: how full the context is, not what the
        # turn cost) is kept as it came.
        return [wrapped_update(update, self.turn)]

    def streamed(self, updates: list[dict[str, Any]]) -> list[StreamedChunk]:
        """The fast path of most of a stream: of `updates`, those from the first on that
        are text or thought chunks going on the open step as it stands (a step without
        calls, so no step ends or starts before them). Each is taken in exactly as
        `update` takes it, and what `update` would return for it, one
        `assistant/chunk`, is returned as its parts (for `SessionLog.append_chunks`).
        Nothing is taken in from the first update on that is not such a chunk:
        `update` decides for it."""
        step = self._step
        chunks: list[StreamedChunk] = []
        if step is None or step.calls or self._ended:  # an open step exists only in a started turn
            return chunks
        number, run, texts = step.number, None, None
        for update in updates:
            name = update.get("sessionUpdate")
            if name == "agent_message_chunk":
                kind: ChunkKind = "text"
            elif name == "agent_thought_chunk":
                kind = "reasoning"
            else:
                break
            content = update.get("content")
            if not isinstance(content, dict) or content.get("type") != "text":
                break
            text = content.get("text")
            if not isinstance(text, str):
                break
            if kind != run or texts is None:
                run, texts = kind, step.texts_for(kind)
            texts.append(text)  # Step.say
            if len(update) != 2 or len(content) != 2:  # more than {sessionUpdate, content: {type, text}}
                chunks.append((number, kind, text, self._sent(update)))
            else:
                chunks.append((number, kind, text, None))
        return chunks

    def asking(self, tool_call: dict[str, Any] | None = None) -> list[Item]:
        """The agent asks the editor something in this turn (a permission about
        `tool_call`, a ToolCallUpdate; a file, a terminal): the open step is written as
        far as it goes (its text and calls so far, silent), before the request is
        passed on, so whatever the editor's answer lets run has its `tool/call` on disk
        (docs/wrap.md, "Ordering and durability"). A call the turn does not know yet is
        known from now on; a known one takes the request's title and input (the
        agent's latest word on it). The calls keep taking their later updates for their
        results; their arguments and title stay those known now."""
        if not self.open:
            return []
        items: list[Item] = []
        if tool_call is not None and isinstance(tool_call.get("toolCallId"), str):
            self._asked_call(tool_call["toolCallId"], tool_call, items)
        if self._step is not None:
            items += self._written(self._step, results=False)
        return items

    def permission(self, tool_call: dict[str, Any], outcome: dict[str, Any]) -> list[Item]:
        """The editor's answer (`outcome`) to the agent's permission request about
        `tool_call` (a ToolCallUpdate): it rides on the call's `tool/result` (a call the
        turn does not know yet is known from now on, as in `asking`)."""
        call_id = tool_call.get("toolCallId")
        if not self.open or not isinstance(call_id, str):
            return []
        value = outcome.get("outcome")
        record: PermissionRecord = {"outcome": value if isinstance(value, str) else "unknown"}
        if isinstance(outcome.get("optionId"), str):
            record["optionId"] = outcome["optionId"]
        items: list[Item] = []
        call = self._asked_call(call_id, tool_call, items)
        if not call.answered:  # else too late: the agent reported its outcome already
            call.permission = record
        return items

    def answer(self, result: dict[str, Any]) -> list[Item]:
        """The wrapped agent's PromptResponse (its reason and usage:
        acp_bridge.wrap.prompt_answers.answer_end)."""
        if not self._starts_end():
            return []
        return self._close(*answer_end(result, self._steps))

    def failed(self, error: dict[str, Any]) -> list[Item]:
        """The wrapped agent's JSON-RPC error answer to the prompt (its reason, the error
        kept whole and named in our words: acp_bridge.wrap.prompt_answers.error_end)."""
        if not self._starts_end():
            return []
        return self._close(error_end(error, self._steps))

    def cancelled(self, by: str, *, forced: bool = False, agent_stop: str | None = None) -> list[Item]:
        """The editor cancelled (`by`: the ACP message that did); `forced`: the agent
        gave no answer within the cancel grace, and the wrapper ended the turn itself;
        `agent_stop`: the agent answered with a stop reason of its own (not
        `cancelled`), kept beside."""
        if by not in CANCELLED_BY:
            raise ValueError(f"cancelled by {by!r} is not one of {list(CANCELLED_BY)}")
        if not self._starts_end():
            return []
        fields: dict[str, JSON] = {"by": by}
        if forced:
            fields["forced"] = True
        if agent_stop:
            fields["agentStopReason"] = agent_stop
        return self._close(reason("cancelled", **fields))

    def known_calls(self) -> list[Item]:
        """The open step's calls and text written out (message, calls, the results
        that came), its calls without a final status left open: for a proxy that closes
        the turn itself (the agent died: `SessionLog.close_interrupted` answers them)."""
        if not self.open or self._step is None:
            return []
        return self._written(self._step)

    # --- steps ---------------------------------------------------------------------

    def _starts_end(self) -> bool:
        if not self._started:
            raise RuntimeError(f"turn {self.turn} ended before it was prompted")
        return not self._ended

    def _model_step(self, items: list[Item]) -> Step:
        """The step what the agent's model says next goes on: the open one, unless its
        calls all have their final status (the agent went back to its model: the next
        step, once no compaction of it is in progress), else a new one."""
        step = self._step
        if step is not None and step.calls and all(self._calls[c].answered for c in step.calls) \
                and not self._compactions.unended():
            items += self._written(step)
            items.append(step_end(self.turn, step.number))
            self._step = step = None
        return self._open_step(items) if step is None else step

    def _chunk(self, kind: ChunkKind, text: str, update: dict[str, Any]) -> list[Item]:
        items: list[Item] = []
        step = self._model_step(items)
        step.say(kind, text)
        sent: dict[str, Any] | None = None
        if len(update) != 2 or len(update["content"]) != 2:  # more than {sessionUpdate, content: {type, text}}
            sent = self._sent(update)
        items.append(assistant_chunk(self.turn, step.number, kind, text, sent))
        return items

    def _sent(self, update: dict[str, Any]) -> dict[str, Any]:
        """What a chunk's update holds besides its kind and text (its `_meta`, an id, a
        content block's other fields): kept in its `assistant/chunk`, so a replay sends
        the update as it came; a `_meta.usage` counts towards the turn's usage."""
        sent = dict(update)  # the others in their order, as the update has them
        del sent["sessionUpdate"]
        content = sent.pop("content")
        if len(content) != 2:
            sent["content"] = content
        if "_meta" in sent:
            self._meta_usage = added_usage(self._meta_usage, sent["_meta"])
        return sent

    def _open_step(self, items: list[Item]) -> Step:
        self._steps += 1
        self._step = Step(self._steps)
        items.append(step_start(self.turn, self._steps))
        return self._step

    def _written(self, step: Step, *, results: bool = True) -> list[Item]:
        return step_items(self.turn, step, self._calls, results=results)

    def _close(self, end: Reason, usage: Usage | None = None) -> list[Item]:
        self._ended = True
        step, self._step = self._step, None
        usage = usage or self._meta_usage
        items: list[Item] = []
        if step is None and usage is not None:  # a turn that said nothing still cost something
            step = self._open_step(items)
            self._step = None
        if step is None:
            return closers(OpenTurn(self.turn, None), Unreported(end))
        # The agent ended the turn without a final status for these calls.
        open_calls = [(cid, self._calls[cid]) for cid in step.calls if not self._calls[cid].answered]
        items += self._written(step)
        if usage is not None:
            items.append(assistant_message(self.turn, step.number, [], usage, silent=True))
        for _, call in open_calls:
            call.answered = True
        unanswered = [Unanswered(cid, call.step, call.name, True, call.permission) for cid, call in open_calls]
        # Their failed results (and the end of a compaction left in progress) tell the
        # transcript; the editor was told nothing (the agent left them as they were), so
        # neither is a replay.
        left = OpenTurn(self.turn, step.number, unanswered, self._compactions.unended())
        return items + [(t, {**d, "silent": True}) if t in (TOOL_RESULT, CONTEXT_COMPACTION) else (t, d)
                        for t, d in closers(left, Unreported(end))]

    # --- tool calls ----------------------------------------------------------------

    def _new_call(self, call_id: str, items: list[Item]) -> AnnouncedCall:
        step = self._step if self._step is not None else self._open_step(items)
        step.said.append(call_id)
        step.calls.append(call_id)
        call = self._calls[call_id] = AnnouncedCall(step.number)
        return call

    def _asked_call(self, call_id: str, tool_call: dict[str, Any], items: list[Item]) -> AnnouncedCall:
        """The call a permission request is about, as the request describes it: its
        title and input are the agent's latest word on the call (qwen-code and opencode
        announce a placeholder, `Shell {}`, `bash {cwd}`, then ask about the command);
        not its status (the request's `pending` says nothing of the outcome) nor its
        content (the question asked). One the turn does not know yet is known from now
        on (qwen-code and gemini-cli may ask before they announce)."""
        call = self._calls.get(call_id)
        if call is None:
            call = self._new_call(call_id, items)
        if not call.written and self._step is not None and call_id in self._step.calls:
            call.take({k: v for k, v in tool_call.items() if k != "status"}, content=False)
        return call

    def _call_update(self, update: dict[str, Any]) -> list[Item]:
        """A `tool_call` or `tool_call_update`: kept as it came, and what it says taken
        into the call (a `tool_call` of a new id announces one). An update after the
        call's final status still counts (an agent may send the output after it): the
        call is written when its step closes. One for an id the turn does not know is
        only kept."""
        items: list[Item] = []
        call_id = update.get("toolCallId")
        call = self._calls.get(call_id) if isinstance(call_id, str) else None
        if call is None and update["sessionUpdate"] == "tool_call" and isinstance(call_id, str):
            call = self._new_call(call_id, items)
        if call is not None and (self._step is None or call_id not in self._step.calls):
            call = None  # a call of a step already written: nothing more can be said of it
        items.append(wrapped_update(update, self.turn))
        if call is not None:
            call.take(update)
        return items
