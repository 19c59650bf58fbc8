"""The crash matrix's scripted sessions and the points at which agent A is killed."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

# --- scenarios ----------------------------------------------------------------------


def _call(cid: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": arguments}


USAGE = {"inputTokens": 40, "outputTokens": 12}


@dataclass(frozen=True)
class Scenario:
    name: str
    prompts: tuple[str, ...]
    steps: tuple[dict[str, Any], ...]  # the model script, one entry per model call
    permissions: tuple[str | None, ...] = ()  # answers in order (None = cancelled)
    chunk_delay_ms: int = 0
    # relative path -> tool call id: if the file exists (or changed) after the kill,
    # that call's `tool/call` must be on disk
    side_effects: tuple[tuple[str, str], ...] = ()
    never: tuple[str, ...] = ()  # files no turn may create (rejected / cancelled writes)
    long_command: bool = False  # holds a 30 s command: only "command"/early points
    span: float = 0.3  # seconds from the first prompt to the last answer, roughly (measured;
    # random delays fall in it)

    @property
    def estimated_updates(self) -> int:
        """Roughly how many session/updates a full run streams (random counts fall in it)."""
        total = 1  # session_info_update
        for entry in self.steps:
            total += len(str(entry.get("thinking", "")).split()) + len(str(entry.get("text", "")).split())
            total += 3 * len(entry.get("toolCalls", ())) + ("usage" in entry)
        return total


LONG_TEXT = " ".join(f"w{n}" for n in range(600))

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "chat",
            ("hello", "think it through", "this one fails", "and the last one"),
            (
                {"thinking": "the user greets me", "text": "Hello! How can I help you today?", "usage": USAGE},
                {"thinking": "first this then that and then the rest",
                 "text": "Here is a longer answer with quite a few words in it to stream out", "usage": USAGE},
                {"text": "partial output before", "error": {"message": "provider overloaded", "code": "overloaded",
                                                            "retryable": True}},
                {"text": "goodbye for now"},
            ),
            chunk_delay_ms=6,
            span=0.33,
        ),
        Scenario(
            "tools",
            ("look around", "write a file", "edit and run", "try a rejected write"),
            (
                {"text": "Looking.", "toolCalls": [_call("r1", "read_file", path="notes.txt"),
                                                   _call("l1", "list_dir", path=".")]},
                {"text": "I see notes.txt with two lines."},
                {"thinking": "a new file", "toolCalls": [_call("w1", "write_file", path="out.txt",
                                                               content="hello\nworld\n")]},
                {"text": "Written out.txt."},
                {"toolCalls": [_call("e1", "edit_file", path="notes.txt", old_text="one", new_text="ONE"),
                               _call("x1", "run_command", command="echo ran > ran.txt; sleep 0.05")]},
                {"text": "Edited and ran.", "usage": USAGE},
                {"toolCalls": [_call("w2", "write_file", path="rejected.txt", content="no\n")]},
                {"text": "Not written, as you wish."},
            ),
            permissions=("allow_once", "allow_once", "allow_once", "reject_once"),
            chunk_delay_ms=5,
            side_effects=(("out.txt", "w1"), ("notes.txt", "e1"), ("ran.txt", "x1")),
            never=("rejected.txt",),
            span=0.3,
        ),
        Scenario(
            "steps",
            ("read in three steps", "write, then cancel the permission", "one more"),
            (
                {"text": "step one", "toolCalls": [_call("s1", "read_file", path="notes.txt", line=1, limit=1)]},
                {"text": "step two", "toolCalls": [_call("s2", "read_file", path="sub/a.txt")]},
                {"thinking": "almost there", "toolCalls": [_call("s3", "list_dir", path="sub")]},
                {"text": "All read."},
                {"toolCalls": [_call("c1", "write_file", path="cancelled.txt", content="x")]},
                {"text": "Still here after the cancel."},
            ),
            permissions=(None,),
            chunk_delay_ms=4,
            never=("cancelled.txt",),
            span=0.12,
        ),
        Scenario(
            "stream",  # one long step: more than one buffer flush (512 events) before its end
            ("stream a lot", "short"),
            ({"text": LONG_TEXT, "usage": USAGE}, {"text": "short answer"}),
            span=0.05,
        ),
        Scenario(
            "command",
            ("warm up", "run the long command"),
            (
                {"text": "ready when you are"},
                {"text": "Running it.", "toolCalls": [_call("x9", "run_command",
                                                            command="echo $$ > cmd.pid; exec sleep 30")]},
                {"text": "done"},
            ),
            permissions=("allow_once",),
            chunk_delay_ms=1,
            side_effects=(("cmd.pid", "x9"),),
            long_command=True,
        ),
    )
}

# --- kill points --------------------------------------------------------------------

KINDS = ("updates", "permission", "command", "answer", "delay", "end")


@dataclass(frozen=True)
class KillPoint:
    """Where to SIGKILL agent A. `n`: the update count (updates), the permission
    request (permission) or the prompt answer (answer) to kill at; `delay`: seconds
    after the first prompt (delay) or after the request/command was seen."""

    scenario: str
    kind: str
    n: int = 0
    delay: float = 0.0

    def label(self) -> str:
        extra = f"#{self.n}" if self.n else ""
        wait = f"+{self.delay * 1000:.0f}ms" if self.delay else ""
        return f"{self.scenario}:{self.kind}{extra}{wait}"


def chosen_points() -> list[KillPoint]:
    """The deterministic catalogue: every answer and permission request of every
    scenario, the running command, and a few update counts."""
    points: list[KillPoint] = []
    for s in SCENARIOS.values():
        answers = range(1, len(s.prompts) + 1) if not s.long_command else range(1, 2)
        points.extend(KillPoint(s.name, "answer", k) for k in answers)
        asks = len(s.permissions) if not s.long_command else 0
        points.extend(KillPoint(s.name, "permission", k) for k in range(1, asks + 1))
        if s.long_command:
            points.append(KillPoint(s.name, "command"))
            points.append(KillPoint(s.name, "permission", 1))
        else:
            points.append(KillPoint(s.name, "end"))
            est = s.estimated_updates
            points.extend(KillPoint(s.name, "updates", n) for n in sorted({1, 2, est // 3, est // 2, est - 2}) if n > 0)
    return points


CI_SAMPLE = (
    KillPoint("chat", "updates", 6),
    KillPoint("chat", "answer", 3),  # right after a failed turn's error answer
    KillPoint("tools", "permission", 1),
    KillPoint("tools", "updates", 30),
    KillPoint("steps", "updates", 9),  # inside a multi-step turn
    KillPoint("stream", "updates", 600),  # after a buffer flush, mid-step
    KillPoint("command", "command"),
)


def random_point(rng: random.Random) -> KillPoint:
    name = rng.choice([s for s in SCENARIOS if not SCENARIOS[s].long_command] + ["command"])
    s = SCENARIOS[name]
    if s.long_command:
        return KillPoint(name, "command", delay=round(rng.uniform(0, 0.1), 3))
    roll = rng.random()
    if roll < 0.5:
        return KillPoint(name, "updates", rng.randint(1, s.estimated_updates))
    if roll < 0.85:
        return KillPoint(name, "delay", delay=round(rng.uniform(0, s.span), 3))
    if s.permissions and roll < 0.95:
        return KillPoint(name, "permission", rng.randint(1, len(s.permissions)), delay=round(rng.uniform(0, 0.02), 3))
    return KillPoint(name, "answer", rng.randint(1, len(s.prompts)))


def sample_points(count: int, seed: int) -> list[KillPoint]:
    """`count` points: the chosen catalogue (cut to `count`), then random ones."""
    rng = random.Random(seed)
    points = chosen_points()[:count]
    while len(points) < count:
        points.append(random_point(rng))
    return points
