"""What a long query costs `acp-bridge sessions search` (issue 34, point 6: "search time
is linear in the query, on every backend").

    python bench/search_query.py [--backends jsonl,sqlite,postgres] [--sizes 1000,4000,20000]
                                 [--repeat 3] [--baseline DIR] [--tmp DIR] [--json PATH]

A store of one session (a two-word prompt, a three-word answer), indexed once; then,
each in its own interpreter (bench/sessions_memory.py's launcher: wall seconds), a
search for one word repeated N times, for a phrase of N words (one word repeated),
and for N distinct words (w0 w1 ..., none in the store), for each N of --sizes. The
median of --repeat runs; a run that exits non-zero is shown with its status (PostgreSQL
refused a phrase of 14,000 words before: "stack depth limit exceeded"). --baseline DIR
runs the same with another tree's code (`git archive COMMIT acp_bridge session | tar -x
-C DIR`) for the before and after.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # measure the tree this script is in, not whatever is installed
    sys.path.insert(0, str(ROOT))

from bench import pg_store  # noqa: E402 (needs ROOT on sys.path)
from bench.common import table, write_results  # noqa: E402
from bench.sessions_memory import run_command  # noqa: E402
from session import SessionStore, open_backend  # noqa: E402

QUERIES: dict[str, Callable[[int], str]] = {
    "repeated": lambda n: " ".join(["alpha"] * n),
    "phrase": lambda n: '"' + " ".join(["alpha"] * n) + '"',
    "distinct": lambda n: " ".join(f"w{i}" for i in range(n)),
}


def build(where: Path | str, backend: str) -> None:
    from tests.support.logs import Script  # the tests' log builder: a real session's events

    store = SessionStore(open_backend(backend, where))
    try:
        log = store.create(cwd="/work")
        log.extend(Script().text_turn("alpha question", "alpha answer here").items)
        log.close()
    finally:
        store.close()


def measure(backends: list[str], sizes: list[int], repeat: int, scratch: Path,
            codes: dict[str, Path]) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for backend in backends:
        folder = scratch / backend
        folder.mkdir()
        where = pg_store.location(backend, folder, fresh=True)
        build(where, backend)
        for tree, code in codes.items():
            indexed = run_command(code, where, backend, ["index", "--rebuild"])
            assert indexed["code"] == 0, indexed["stderr"]
            for kind, make in QUERIES.items():
                for n in sizes:
                    done = [run_command(code, where, backend, ["search", make(n), "--json"])
                            for _ in range(repeat)]
                    runs.append({"backend": backend, "tree": tree, "query": kind, "words": n,
                                 "seconds": statistics.median(r["seconds"] for r in done),
                                 "codes": sorted({r["code"] for r in done}),
                                 "stderr": done[-1]["stderr"][-200:]})
        if backend == "postgres":
            pg_store.drop(where)
    return {"python": platform.python_version(), "repeat": repeat, "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="jsonl,sqlite,postgres")
    parser.add_argument("--sizes", default="1000,4000,20000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="also run with another tree's code")
    parser.add_argument("--tmp", type=Path, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    codes = {"ours": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    scratch = Path(tempfile.mkdtemp(prefix="search-query-", dir=args.tmp))
    try:
        results = measure(args.backends.split(","), [int(s) for s in args.sizes.split(",")],
                          max(1, args.repeat), scratch, codes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = [[r["backend"], r["tree"], r["query"], f"{r['words']:,}", f"{r['seconds']:.2f}",
             ",".join(map(str, r["codes"]))] for r in results["runs"]]
    write_results(table(["backend", "tree", "query", "words", "seconds", "exit"], rows, left=3), results,
                  args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
