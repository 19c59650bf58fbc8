"""How fast `acp-bridge import` reads native history (issue 37: 50 MB/s on 2 cores, peak
RSS under 150 MB, for 1 GB), bench/README.md "Import".

    .venv/bin/python bench/import_speed.py [--mb 200] [--turns 200] [--backend jsonl] [--json]

Makes `--mb` MB of Claude Code transcripts in a temporary folder, each session
`--turns` turns of the recorded fixture's tool turn (tests/recorded/native/) under fresh
ids, with a 2 KB command output each, then runs the real `acp-bridge import FOLDER` on a
fresh store (`--backend`) and reports MB read per second of wall time and the import
process's peak RSS (getrusage of the child). A second run over the same folder times
an import that finds every session imported already.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = next((ROOT / "tests" / "recorded" / "native" / "claude-code-2.1.197").glob("*.jsonl"))


def session_text(n: int, turns: int) -> bytes:
    """A transcript of `turns` tool turns: the fixture's second turn again and again."""
    records = [orjson.loads(line) for line in FIXTURE.read_bytes().splitlines()]
    second = next(i for i, r in enumerate(records) if r.get("message", {}).get("content") == "RUN: cat notes.txt")
    turn = [orjson.dumps(r).decode() for r in records[second:] if r["type"] in ("user", "assistant")]
    sid = records[0]["sessionId"]
    out = [orjson.dumps(r).decode().replace(sid, f"{n:08d}-0000-4000-8000-000000000000") for r in records[:second]]
    for t in range(turns):
        for line in turn:
            text = line.replace(sid, f"{n:08d}-0000-4000-8000-000000000000")
            text = text.replace("msg_fake_", f"msg_{n}_{t}_").replace("toolu_fake_1", f"toolu_{n}_{t}")
            out.append(text.replace("notes from the fixture", "x" * 2000))
    return ("\n".join(out) + "\n").encode()


def run(folder: Path, store: Path, backend: str) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "acp_bridge", "import", str(folder), "--store", str(store),
                           "--backend", backend], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"import failed: {done.stderr.decode()[-2000:]}")
    return took, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(prog="import_speed")
    parser.add_argument("--mb", type=int, default=200, help="MB of native transcripts (default 200)")
    parser.add_argument("--turns", type=int, default=200, help="turns per session (default 200)")
    parser.add_argument("--backend", default="jsonl", choices=("jsonl", "sqlite"))
    parser.add_argument("--json", action="store_true", help="the results as JSON on stdout")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        folder, store = Path(temp, "native"), Path(temp, "store")
        folder.mkdir()
        total, n = 0, 0
        while total < args.mb * 1_000_000:
            data = session_text(n, args.turns)
            Path(folder, f"{n:05d}.jsonl").write_bytes(data)
            total, n = total + len(data), n + 1
        first, rss = run(folder, store, args.backend)
        again, _ = run(folder, store, args.backend)
    result = {"backend": args.backend, "sessions": n, "mb": round(total / 1e6, 1),
              "seconds": round(first, 2), "mb_per_s": round(total / 1e6 / first, 1),
              "peak_rss_mb": round(rss / 1024, 1), "again_seconds": round(again, 2),
              "again_mb_per_s": round(total / 1e6 / again, 1)}
    if args.json:
        print(orjson.dumps(result).decode())
    else:
        for key, value in result.items():
            print(f"{key:>16}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
