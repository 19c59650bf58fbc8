"""The SDK echo agent (bench/sdk_echo_agent.py: no loadSession, so every load through
`wrap` restores `fresh`), recording each prompt's text it gets as a JSON line in a file,
for tests/test_wrap_seed.py.

    python tests/support/wrap_seed_agent.py RECORD [--ask] [--fail-seed]

--ask: on the wrapper's seed prompt, ask the editor for a permission first and record
the outcome; --fail-seed: answer the seed prompt with an error.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from acp import Agent, PromptResponse, RequestError, run_agent
from acp.schema import PermissionOption, ToolCallUpdate

from bench.sdk_echo_agent import EchoAgent, prompt_text

SEED = "The conversation so far, restored by acp-bridge"


class RecordingAgent(EchoAgent):
    def __init__(self, record: Path, flags: list[str]) -> None:
        super().__init__()
        self.record = record
        self.flags = flags

    def _write(self, entry: dict[str, Any]) -> None:
        with self.record.open("a") as out:
            out.write(json.dumps(entry) + "\n")

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        text = prompt_text(prompt)
        self._write({"sessionId": session_id, "text": text})
        if text.startswith(SEED):
            if "--ask" in self.flags:
                assert self._conn is not None
                answer = await self._conn.request_permission(
                    session_id=session_id, tool_call=ToolCallUpdate(tool_call_id="seed-1", title="seed"),
                    options=[PermissionOption(option_id="allow", name="Allow", kind="allow_once")])
                self._write({"permission": answer.outcome.model_dump(by_alias=True)})
            if "--fail-seed" in self.flags:
                raise RequestError.internal_error({"why": "seed refused"})
        return await super().prompt(session_id, prompt, **kwargs)


async def main() -> None:
    await run_agent(cast(Agent, RecordingAgent(Path(sys.argv[1]), sys.argv[2:])))


if __name__ == "__main__":
    asyncio.run(main())
