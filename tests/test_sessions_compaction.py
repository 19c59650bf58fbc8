"""A compaction of the model's context as `acp-bridge sessions` shows it (docs/sessions:
`show`, the Markdown and HTML exports) and finds it (`search --in summary`): in the step
whose call needed it, with what it did, its summary, and the summary call's tokens
counted with the step's. A wrapped agent's notices (recorded for the transcript, never
replayed: docs/wrap.md) are shown where they came."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.support.logs import Script
from tests.support.search_store import DAY0, add_session
from tests.test_sessions_cli import cli

SUMMARY = "The user chose the zebra parser."


@pytest.fixture(params=["jsonl", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def session(tmp_path: Path, kind: str) -> str:
    script = Script().text_turn("one", "uno").text_turn("two", "dos")
    script.compacted_turn(SUMMARY, "three", "tres")
    script.start_turn("four").start_step().compaction("t4s1-compaction", to_turn=3, from_turn=3)
    script.compaction("t4s1-compaction", "failed", to_turn=3, from_turn=3,
                      error="The summary could not be made: rate limited.")
    script.chunk("cuatro").message("cuatro").end_step().end_turn()
    (tmp_path / "work").mkdir()
    return add_session(tmp_path / "store", kind, str(tmp_path / "work"), script, DAY0)


def run(tmp_path: Path, kind: str, *args: str) -> str:
    result = cli("--store", str(tmp_path / "store"), "--backend", kind, *args)
    assert result.code == 0, result.err
    return result.out


def test_show_puts_the_compaction_in_its_step(tmp_path: Path, kind: str, session: str) -> None:
    lines = run(tmp_path, kind, "show", session).splitlines()
    at = lines.index("    Compaction, completed: the conversation up to turn 2 summarized for the model")
    assert lines[at - 1] == "  Step 1 · tokens 60 in / 8 out"  # the answer's 10/3 and the summary call's 50/5
    assert lines[at + 1:at + 5] == ["    Summary:", f"      {SUMMARY}", "    Assistant:", "      tres"]
    assert "    Compaction, failed: the conversation up to turn 3 summarized for the model (read from turn 3 on); " \
           "error: The summary could not be made: rate limited." in lines


def test_the_exports_show_it(tmp_path: Path, kind: str, session: str) -> None:
    markdown = run(tmp_path, kind, "export", session, "--format", "md")
    assert "**Compaction, completed: the conversation up to turn 2 summarized for the model**" in markdown
    assert f"> {SUMMARY}" in markdown
    page = run(tmp_path, kind, "export", session, "--format", "html")
    assert "<summary>Compaction, completed: the conversation up to turn 2 summarized for the model</summary>" in page
    assert SUMMARY in page


def test_search_finds_a_summary(tmp_path: Path, kind: str, session: str) -> None:
    hits = orjson.loads(run(tmp_path, kind, "search", "zebra", "--json"))
    assert [(h["sessionId"], h["turn"], h["step"], h["kind"]) for h in hits] == [(session, 3, 1, "summary")]
    assert orjson.loads(run(tmp_path, kind, "search", "zebra", "--in", "answer", "--json")) == []
    assert len(orjson.loads(run(tmp_path, kind, "search", "zebra", "--in", "summary", "--json"))) == 1


MCP_DOWN = {"sessionUpdate": "notice", "severity": "warning", "title": "MCP server unavailable",
            "description": "Continuing without it."}
SLOW = {"sessionUpdate": "notice", "severity": "info", "title": "Slow <tool>"}


@pytest.fixture
def noticed(tmp_path: Path, kind: str) -> str:
    # As tests/support/compacting_agent.py sends them through the wrapper: one before any
    # model output (no step yet), one inside a step.
    script = Script().start_turn("go").add("wrapped/update", {"turn": 1, "update": MCP_DOWN})
    script.start_step().chunk("done").add("wrapped/update", {"turn": 1, "update": SLOW})
    script.message("done").end_step().end_turn()
    (tmp_path / "work").mkdir()
    return add_session(tmp_path / "store", kind, str(tmp_path / "work"), script, DAY0)


def test_show_and_the_exports_show_a_wrapped_agents_notices_where_they_came(
        tmp_path: Path, kind: str, noticed: str) -> None:
    lines = run(tmp_path, kind, "show", noticed).splitlines()
    before = "  Notice (warning): MCP server unavailable — Continuing without it."
    assert lines[lines.index("    go") + 1] == before  # after the prompt, before step 1
    at = lines.index("    Notice (info): Slow <tool>")
    assert lines[at - 2:at] == ["    Assistant:", "      done"]  # in its step
    markdown = run(tmp_path, kind, "export", noticed, "--format", "md")
    assert "*Notice (warning): MCP server unavailable — Continuing without it.*" in markdown
    page = run(tmp_path, kind, "export", noticed, "--format", "html")
    assert '<p class="info">Notice (info): Slow &lt;tool&gt;</p>' in page
    assert '<p class="info">Notice (warning): MCP server unavailable — Continuing without it.</p>' in page
