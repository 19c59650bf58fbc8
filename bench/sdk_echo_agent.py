"""The reference side of bench/protocol.py: an echo agent built on the official ACP
Python SDK (`agent-client-protocol`, imported as `acp`), the way the SDK's own
examples build one.

    python bench/sdk_echo_agent.py

It speaks ACP over stdio through `acp.run_agent` (the SDK's `AgentSideConnection`
over `acp.stdio_streams`). On `session/prompt` it streams the prompt's text back one
`agent_message_chunk` per whitespace-separated word (`word + " "`), exactly like
acp-bridge's `echo` model, and answers `end_turn`. It records nothing: no store, no
log, no fsync. Sessions are a set of ids in memory.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, cast
from uuid import uuid4

from acp import (
    PROTOCOL_VERSION,
    Agent,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
    update_agent_message_text,
)
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    EmbeddedResourceContentBlock,
    Implementation,
    TextContentBlock,
    TextResourceContents,
)


def prompt_text(prompt: list[Any]) -> str:
    """The text of a prompt's blocks (text blocks and embedded text resources), as
    acp_bridge.models.echo.prompt_text reads it."""
    parts: list[str] = []
    for block in prompt:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, EmbeddedResourceContentBlock) and isinstance(
            block.resource, TextResourceContents
        ):
            parts.append(block.resource.text)
    return "\n".join(parts)


class EchoAgent:
    """initialize, session/new, session/prompt and session/cancel. The SDK's `Agent`
    is a Protocol: methods this class lacks are answered by the SDK's router with
    method-not-found."""

    def __init__(self) -> None:
        self._conn: Client | None = None
        self._sessions: set[str] = set()

    def on_connect(self, conn: Client) -> None:
        self._conn = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="sdk-echo", title="SDK echo", version="0"),
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        session_id = str(uuid4())
        self._sessions.add(session_id)
        return NewSessionResponse(session_id=session_id)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        if session_id not in self._sessions:
            raise RequestError.invalid_params({"sessionId": session_id})
        assert self._conn is not None
        for word in prompt_text(prompt).split():
            await self._conn.session_update(
                session_id=session_id, update=update_agent_message_text(word + " ")
            )
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None  # a prompt here never waits: nothing to cancel


async def main() -> None:
    await run_agent(cast(Agent, EchoAgent()))  # a structural subset of the Agent protocol


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
