"""The kill -9 crash matrix: scripted sessions through the real stdio agent, killed
with SIGKILL at chosen and at random points, then loaded by a new agent process.

    python bench/crash_matrix.py --points 200 --backend jsonl|sqlite|both [--seed S] [--jobs J]
    python bench/crash_matrix.py --points 200 --backend both --wrap [wrapper|child|both]

With `--wrap`, agent A is `acp-bridge wrap` around our own `serve` on the same scripts,
and the SIGKILL goes to the wrapper, to its child, or (both, the default) to each in
turn, on the same points (tests/support/crash_matrix/wrap.py).

The command line of the long form. The engine (scenarios, kill points, the three
phases, every check) is tests/support/crash_matrix/, whose docstring lists the checks;
tests/test_crash_matrix.py runs a CI sample of it and the soak form.

Prints counts (kill points, loads ok, failures) and exits 1 if anything failed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the repo's packages (tests/ included)
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import orjson  # noqa: E402

from tests.support.crash_matrix import Run, format_counts, run_matrix, sample_points  # noqa: E402


class Ticker:
    """Progress on stderr every 25 kill points."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0

    def __call__(self, run: Run) -> None:
        self.done += 1
        if self.done % 25 == 0 or self.done == self.total:
            print(f"  {self.done}/{self.total} killed", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--points", type=int, default=200, help="kill points per backend (default 200)")
    parser.add_argument("--backend", choices=("jsonl", "sqlite", "both"), default="both")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time based, printed)")
    parser.add_argument("--jobs", type=int, default=2, help="agents killed in parallel (default 2)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the stores under this folder")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON too")
    parser.add_argument("--wrap", nargs="?", const="both", choices=("wrapper", "child", "both"), default=None,
                        help="through `acp-bridge wrap`: kill the wrapper, its child, or both in turn")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    backends = ("jsonl", "sqlite") if args.backend == "both" else (args.backend,)
    points = sample_points(args.points, seed)
    print(f"crash matrix: {args.points} points per backend, seed {seed}, jobs {args.jobs}"
          + (f", through wrap (kill: {args.wrap})" if args.wrap else ""), flush=True)
    targets: tuple[str | None, ...] = (None,) if args.wrap is None else (
        ("wrapper", "child") if args.wrap == "both" else (args.wrap,))
    total_failures = 0
    for backend, target in ((b, t) for b in backends for t in targets):
        name = backend if target is None else f"{backend}-wrap-{target}"
        base = args.keep / name if args.keep else Path(tempfile.mkdtemp(prefix=f"crash-{name}-"))
        try:
            report = anyio.run(run_matrix, points, backend, base, args.jobs, Ticker(len(points)), target)
        finally:
            if args.keep is None:
                shutil.rmtree(base, ignore_errors=True)
        counts = report.counts()
        print(format_counts(counts), flush=True)
        if args.json:
            print(orjson.dumps(counts).decode(), flush=True)
        for failure in report.failures:
            print(f"FAIL {failure}", flush=True)
        total_failures += counts["failures"]
    return 1 if total_failures else 0


if __name__ == "__main__":
    sys.exit(main())
