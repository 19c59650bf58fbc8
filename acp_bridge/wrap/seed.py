"""Seeding a fresh child session with the transcript (`acp-bridge wrap --seed-fresh`).

When the wrapped agent cannot load or resume a session of ours (the restore ended
`fresh`, acp_bridge.wrap.children), its new session knows nothing of the conversation.
With `--seed-fresh` the wrapper sends it one `session/prompt` of its own: a text block
with a short preface and the conversation as text (per turn, the user's prompt and the
agent's final text, from our log's model transcript, the last whole turns that fit
`SEED_CHARS`). The exchange is the wrapper's: it is not recorded as a turn and not shown
to the editor (the session is `Seeding` meanwhile: the child's updates are dropped, a
permission it asks for is answered `cancelled`, its other requests are refused, its
notifications dropped: acp_bridge.wrap.lifecycle, acp_bridge.wrap.upstream). Opt-in: it
costs a model call of the wrapped agent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import anyio

from acp_bridge.errors import AgentExitedError
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.rpc.protocol import ClientError
from acp_bridge.wrap.initialize import obj
from acp_bridge.wrap.link import ChildLink
from acp_bridge.wrap.sessions import WrappedSession
from acp_bridge.wrap.signals import SeedBegan, SeedEnded
from session import SessionStore
from session.events import Event
from session.scan import Damage
from session.transcript import DEFAULT_HISTORY_TOKENS, SUMMARY_INTRO, Message, Transcript

log = logging.getLogger("acp_bridge.wrap.seed")

SEED_CHARS: Final = 100_000  # the transcript text sent, at most (whole turns, the last ones)
PREFACE: Final = "The conversation so far, restored by acp-bridge from its log; reply only with OK."


@dataclass(frozen=True)
class SeedText:
    text: str
    turns: int  # turns included
    left_out: int  # earlier turns left out (the bound)


def _block_text(block: Any) -> str:
    """A prompt content block as text (what a model would be told of it)."""
    block = obj(block)
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return str(block["text"])
    if kind == "resource":
        resource = obj(block.get("resource"))
        if isinstance(resource.get("text"), str):
            return f"[resource {resource.get('uri', '')}]\n{resource['text']}"
        return f"[resource {resource.get('uri', '')}]"
    if kind == "resource_link":
        return f"[resource link {block.get('uri', '')}]"
    return f"[{kind or 'content'}]"


def turns_of(messages: list[Message]) -> list[tuple[str, str]]:
    """(the user's prompt, the agent's final text) per turn, in order: the final text is
    the text of the turn's last assistant message that has any."""
    turns: list[tuple[str, str]] = []
    for message in messages:
        if message["role"] == "user":
            turns.append(("\n".join(_block_text(b) for b in message["content"]), ""))
        elif message["role"] == "assistant" and turns:
            text = "".join(b["text"] for b in message["content"] if b["type"] == "text")
            if text:
                turns[-1] = (turns[-1][0], text)
    return turns


def seed_text(messages: list[Message], limit: int = SEED_CHARS) -> SeedText:
    """The seed prompt's text: the preface, then the last whole turns whose text fits
    `limit` characters (the last turn always, cut to fit if it alone is over it); the
    summary of a compaction that stands for the earlier turns first, when it fits too."""
    summary = ""
    if messages and messages[0]["role"] == "user" and messages[0]["content"][:1] == [
            {"type": "text", "text": SUMMARY_INTRO}]:
        blocks = messages[0]["content"][1:]
        summary = "## Summary of the earlier conversation\n" + "\n".join(_block_text(b) for b in blocks) + "\n"
        messages = messages[1:]
    rendered = [f"## User (turn {i})\n{user}\n\n## Agent (turn {i})\n{agent or '(no text)'}\n"
                for i, (user, agent) in enumerate(turns_of(messages), 1)]
    kept: list[str] = []
    size = 0
    for part in reversed(rendered):
        if kept and size + len(part) > limit:
            break
        kept.append(part[-limit:] if not kept else part)
        size += len(part)
    kept.reverse()
    left_out = len(rendered) - len(kept)
    if summary and not left_out and size + len(summary) <= limit:
        kept.insert(0, summary)  # the turns it stands for are not in `rendered`: not counted as turns
        return SeedText(PREFACE + "\n\n" + "\n".join(kept), len(kept) - 1, 0)
    preface = PREFACE
    if left_out:
        preface += f" The {left_out} earliest turn(s) were left out for length; the last {len(kept)} follow."
    return SeedText(preface + "\n\n" + "\n".join(kept), len(kept), left_out)


def read_messages(store: SessionStore, sid: str) -> list[Message]:
    """The model transcript of a stored session, read as stored now (blocking: run it in
    a worker thread, after the live log was handed to the OS)."""
    transcript = Transcript(budget=DEFAULT_HISTORY_TOKENS)
    stream = store.backend.read_stream(sid)
    try:
        for block in stream.blocks():
            transcript.feed_all(_events(block))
    finally:
        stream.close()
    return transcript.messages


def _events(block: list[Event | Damage]) -> Iterator[Event]:
    return (event for event in block if not isinstance(event, Damage))


async def seed(ws: WrappedSession, link: ChildLink, store: SessionStore) -> dict[str, Any]:
    """Send the seed prompt to `ws`'s (fresh) child session; what the load answer's
    `_meta.acpBridge.wrapped` adds: `seeded`, `seedTurns`, `seedLeftOut`, `seedError`.
    Never raises for the child's failure (an error answer, its death): the load goes on."""
    child_sid = ws.state.child_sid
    assert child_sid is not None
    await anyio.to_thread.run_sync(ws.log.flush)
    messages = await anyio.to_thread.run_sync(read_messages, store, ws.id)
    text = seed_text(messages)
    if text.turns == 0:
        return {"seeded": False, "seedTurns": 0}
    params = {"sessionId": child_sid, "prompt": [{"type": "text", "text": text.text}]}
    out: dict[str, Any] = {"seedTurns": text.turns, "seedLeftOut": text.left_out}
    ws.to(SeedBegan())
    done = False
    try:
        result = await link.call("session/prompt", params)
        done = True
    except (ClientError, AgentExitedError) as exc:
        done = True
        why = to_rpc_error(exc).message
        log.warning("session %s: the wrapped agent failed the seed prompt: %s", ws.id, why)
        return {**out, "seeded": False, "seedError": why}
    finally:
        ws.to(SeedEnded())
        if not done:  # our wait was cancelled (the editor cancelled the load): stop it
            link.notify("session/cancel", {"sessionId": child_sid})
    stop = obj(result).get("stopReason")
    if stop in ("cancelled", "refusal") or not isinstance(stop, str):
        return {**out, "seeded": False, "seedError": f"the wrapped agent ended the seed prompt with {stop!r}"}
    log.info("session %s: seeded the fresh session %s with %d turn(s)", ws.id, child_sid, text.turns)
    return {**out, "seeded": True}
