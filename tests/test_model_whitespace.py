"""`echo` and `script:` keep whitespace exactly: they stream a word at a time (each chunk
a word with the whitespace after it), and the chunks joined back are the text byte for
byte, so a client can be shown markdown from them (they used to turn every newline and
run of spaces into one space)."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_bridge.models.base import word_chunks
from tests.support.acp_client import AgentProcess, write_script

MARKDOWN = "# Title\n\nSome *text*,  two spaces.\n\n- one\n- two\n\n```python\ndef f():\n\treturn 1\n```\n"


def well_cut(text: str, chunks: list[str]) -> None:
    assert "".join(chunks) == text
    if text.strip():
        # one word each (the first one also takes the text's leading whitespace)
        assert all(len(chunk.split()) == 1 for chunk in chunks), chunks
        assert all(not chunk[0].isspace() for chunk in chunks[1:]), chunks
    else:
        assert chunks == ([text] if text else [])


@given(st.text(alphabet=st.sampled_from("ab \t\n\r\x0b\x0c\u00a0\u2028"), max_size=40) | st.text(max_size=40))
def test_word_chunks_keep_every_character(text: str) -> None:
    well_cut(text, word_chunks(text))


def chunks_of(updates: list[dict[str, object]], kind: str) -> list[str]:
    return [str(u["content"]["text"]) for u in updates  # type: ignore[index]
            if u.get("sessionUpdate") == kind]


@pytest.mark.integration
def test_echo_and_script_stream_markdown_as_written(tmp_path: Path) -> None:
    thinking = "First:\n  check the\tfile.\n"
    model = write_script(tmp_path / "model.json", {"thinking": thinking, "text": MARKDOWN})
    work = tmp_path / "work"
    work.mkdir()

    async def main() -> None:
        for spec in ("echo", model):
            async with AgentProcess(tmp_path / f"store-{spec[:4]}", model=spec) as agent:
                await agent.initialize()
                sid = await agent.new_session(work)
                await agent.prompt(sid, MARKDOWN)
                updates = agent.updates_of(sid)
                text = chunks_of(updates, "agent_message_chunk")
                well_cut(MARKDOWN, text)
                assert len(text) == len(re.findall(r"\S+", MARKDOWN))
                if spec != "echo":
                    well_cut(thinking, chunks_of(updates, "agent_thought_chunk"))

    anyio.run(main)
