"""What the benchmarks (bench/persistence.py, bench/protocol.py, ...) share: the
repository root, the fixtures' working directory and fixed clock, the word list of their
code-like text, the file system probe, the layout of their tables and where their
results go."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
CWD = "/home/dev/project"
# The recording of each real agent the benches play (tests/wrapped_agents/): the one
# their figures in bench/README.md were measured with (later recordings of an agent, for
# tests, are not benched: a newer version or another mode changes what is measured).
BENCHED_RECORDINGS = {"codex-acp": "codex-acp-0.16.0", "qwen-code": "qwen-code-0.15.10",
                      "opencode": "opencode-1.18.33", "gemini-cli": "gemini-cli-0.61.0"}
FIXED_TIME = 1_700_000_000_000  # the load fixtures use a fixed clock: same bytes in both backends

VOCABULARY = (
    "the function returns a list of events from the log and we check each one against "
    "invariants before writing it to disk so that a crash never leaves a torn record in "
    "the committed region def load self session_id path open read bytes split lines parse "
    "import orjson return value if not isinstance dict raise error else for item in items "
    "class Store backend write sync flush close turn step tool call result message chunk"
)


def recording(agent: str) -> Path | None:
    """The benched recording of `agent` (its name without the version), None if there
    is none."""
    name = BENCHED_RECORDINGS.get(agent)
    found = ROOT / "tests" / "wrapped_agents" / f"{name}.jsonl" if name else None
    return found if found is not None and found.exists() else None


def filesystem_of(path: str) -> str:
    """The mount point and type holding `path` (Linux /proc/mounts), best effort."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    real = os.path.realpath(path)
    best = ("", "unknown")
    for line in mounts:
        parts = line.split()
        if len(parts) < 3 or len(parts[1]) < len(best[0]):
            continue
        if real == parts[1] or real.startswith(parts[1].rstrip("/") + "/"):
            best = (parts[1], parts[2])
    return f"{best[1]} ({best[0]})" if best[0] else "unknown"


def table(headers: list[str], rows: list[list[str]], left: int = 2) -> str:
    """Columns padded to their widest cell: the first `left` left-aligned, the others
    right-aligned; a rule of dashes under the headers."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([fmt(headers), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows)])


def write_results(text: str, results: dict[str, Any], json_path: str | None) -> None:
    """The table `text` on stdout, and the `results` as JSON to `json_path` if given;
    `-`: the JSON on stdout and the table on stderr (for a pipe)."""
    data = orjson.dumps(results, option=orjson.OPT_INDENT_2) + b"\n"
    if json_path == "-":
        print(text, file=sys.stderr)
        sys.stdout.buffer.write(data)
    else:
        print(text)
        if json_path:
            Path(json_path).write_bytes(data)
