"""`acp-bridge sessions list`, `search` and `stats` on a store of many sessions (issue
26, point 5).

    python bench/sessions_scale.py [--sessions 10000] [--backends jsonl,sqlite,postgres]
                                   [--tmp DIR] [--baseline DIR] [--json PATH]

One template session (2 turns, about 119 KB of JSONL: a prompt, streamed thinking and
text, a tool call and its ~50 KB output, then a second step; a second, shorter turn) is
written through the store, then copied N times (default 10,000) with fresh ids, one
minute apart, in 10 cwds, each prompt naming a word of its own (`w00042`): JSONL by
re-encoding its lines, SQLite and PostgreSQL by one INSERT ... SELECT each from the
template's rows (the copies are what the store would hold, checked as every read checks
them). Then each command runs in its own interpreter (bench/sessions_memory.py's
launcher: peak RSS from /proc, wall seconds): `list -n 50` (the first page), `list`
(every session), `index` (the first build, then a pass with nothing new), `search` for
a word of every session, for one session's own word, for a phrase with filters, and
`stats` by day and by model, then `list -n 50` and `list` again, now that an index is
there to take their facts from (PostgreSQL: `list -n 50 (logs)` too, with no session
vouched for by the store, so read from the logs). Before all of them, `list` on an empty store: the
interpreter and the imports alone. Targets: first page under 0.3 s (with and without
an index), a search under 1 s once indexed, stats under 5 s, peak RSS under 150 MB
for each. With --repeat N every command but the first index build and the whole list
without an index runs N times: its median is shown, every time is in --json, with the
load average (1 min) at each run: the machine's other work is in the seconds.

--baseline DIR runs `list -n 50` and `list` with another tree's code too (DIR holds its
`acp_bridge/` and `session/`: `git archive COMMIT acp_bridge session | tar -x -C DIR`).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # measure the tree this script is in, not whatever is installed
    sys.path.insert(0, str(ROOT))

from bench import pg_store  # noqa: E402 (needs ROOT on sys.path)
from bench.common import CWD, FIXED_TIME, VOCABULARY, table  # noqa: E402
from bench.sessions_memory import run_command  # noqa: E402
from session import SessionStore, open_backend  # noqa: E402

MARK = "zzmarkzz"  # the template's own word, replaced by each copy's
MINUTE = 60_000
CWDS = 10
TARGETS = {"list -n 50": 0.3, "search": 1.0, "stats": 5.0}  # seconds; and 150 MB for each
TARGET_MB = 150
COMMANDS: list[tuple[str, list[str]]] = [
    ("list -n 50", ["list", "-n", "50"]),
    ("list -n 50 (logs)", ["list", "-n", "50"]),  # postgres: no session vouched for (see _copy_in_postgres)
    ("list", ["list"]),
    ("index (first)", ["index"]),
    ("index (no change)", ["index"]),
    ("list -n 50 (indexed)", ["list", "-n", "50"]),
    ("list (indexed)", ["list"]),
    ("search common", ["search", "timeout"]),
    ("search rare", ["search", "w04242"]),
    ("search phrase+filters", ["search", '"connection refused"', "--cwd", CWD + "3", "--ended", "completed",
                               "--since", "2023-01-01"]),
    ("stats --by day", ["stats"]),
    ("stats --by model", ["stats", "--by", "model"]),
]
# What a store that vouches for no session costs (one written before schema version 3,
# or by hand): shown, not a target (such sessions are vouched for as agents load them).
DIAGNOSTIC = ("list -n 50 (logs)",)
BASELINE_COMMANDS = ("list -n 50", "list", "list -n 50 (indexed)")
ONCE = ("index (first)", "list")  # the first changes the store's index; the second takes 20-150 s


def _words(n: int, seed: int) -> str:
    words = VOCABULARY.split()
    return " ".join(words[(seed * 7 + i * 13) % len(words)] for i in range(n))


def template_items() -> list[tuple[str, dict[str, Any]]]:
    """The template's events: turn 1 reads a file (a ~50 KB output), turn 2 answers."""
    items: list[tuple[str, dict[str, Any]]] = []

    def add(etype: str, data: dict[str, Any]) -> None:
        items.append((etype, data))

    output = "\n".join(f"{i:5d}  {_words(12, i)} connection refused" if i % 97 == 0 else f"{i:5d}  {_words(12, i)}"
                       for i in range(600))
    for turn, prompt in ((1, f"please look at the {MARK} timeout in the loader"), (2, "and now fix it")):
        t = {"turn": turn}
        add("turn/start", t | {"trigger": {"kind": "prompt"}, "mode": "ask", "model": "openai:gpt-4o"})
        add("user/message", t | {"content": [{"type": "text", "text": prompt}]})
        s = {"turn": turn, "step": 1}
        add("step/start", s)
        thinking, text = _words(60, turn), _words(200, turn + 5)
        for word in thinking.split()[:30]:
            add("assistant/chunk", s | {"chunk": {"type": "reasoning", "text": word + " "}})
        for word in text.split():
            add("assistant/chunk", s | {"chunk": {"type": "text", "text": word + " "}})
        content: list[dict[str, Any]] = [{"type": "reasoning", "text": thinking}, {"type": "text", "text": text}]
        if turn == 1:
            content.append({"type": "tool-call", "id": "c1", "name": "read_file",
                            "arguments": orjson.dumps({"path": "src/loader.py"}).decode()})
        add("assistant/message", s | {"content": content, "usage": {"inputTokens": 12_000, "outputTokens": 800,
                                                                    "cacheReadTokens": 9_000}})
        if turn == 1:
            add("tool/call", s | {"callId": "c1", "name": "read_file", "arguments": {"path": "src/loader.py"},
                                  "title": "Read src/loader.py", "kind": "read"})
            add("tool/result", s | {"callId": "c1", "content": [{"type": "text", "text": output}], "isError": False})
            add("step/end", s)
            s = {"turn": turn, "step": 2}
            add("step/start", s)
            done = _words(150, 9)
            for word in done.split():
                add("assistant/chunk", s | {"chunk": {"type": "text", "text": word + " "}})
            add("assistant/message", s | {"content": [{"type": "text", "text": done}],
                                          "usage": {"inputTokens": 30_000, "outputTokens": 400}})
        add("step/end", s)
        add("turn/end", t | {"reason": {"kind": "completed"}})
    return items


def write_template(kind: str, where: Path | str) -> str:
    backend = open_backend(kind, where)
    try:
        store = SessionStore(backend, clock=itertools.count(FIXED_TIME, 10).__next__)
        log = store.create(cwd=CWD + "0", keep_history=False)
        log.extend(template_items())  # type: ignore[arg-type]
        log.sync()
        sid = log.id
        log.close()
    finally:
        backend.close()
    return sid


def copies(n: int) -> list[tuple[str, int, str, str]]:
    """(id, time shift in ms, word, cwd) of each copy; the template is copy 0."""
    return [(str(uuid.UUID(int=i + 1, version=4)), i * MINUTE, f"w{i:05d}", f"{CWD}{i % CWDS}") for i in range(n)]


def build_jsonl(root: Path, n: int) -> int:
    sid = write_template("jsonl", root)
    path = root / "sessions" / f"{sid}.jsonl"
    header, *events = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    path.unlink()
    total = 0
    for new_id, shift, word, cwd in copies(n):
        lines = [orjson.dumps(header | {"id": new_id, "createdAt": header["createdAt"] + shift, "cwd": cwd})]
        for event in events:
            moved = event | {"time": event["time"] + shift}
            line = orjson.dumps(moved)
            lines.append(line.replace(MARK.encode(), word.encode()) if event["type"] == "user/message" else line)
        data = b"\n".join(lines) + b"\n"
        out = root / "sessions" / f"{new_id}.jsonl"
        out.write_bytes(data)
        last = (events[-1]["time"] + shift) * 1_000_000
        os.utime(out, ns=(last, last))
        total += len(data)
    return total


def build_sql(kind: str, where: Path | str, n: int) -> None:
    """Copies by INSERT ... SELECT from the template's rows, in the database itself."""
    sid = write_template(kind, where)
    rows = copies(n)
    if kind == "sqlite":
        import sqlite3

        db = sqlite3.connect(Path(where) / "sessions.sqlite3", isolation_level=None)
        db.execute("BEGIN")
        db.execute("CREATE TEMP TABLE c (id TEXT, shift INTEGER, word TEXT, cwd TEXT)")
        db.executemany("INSERT INTO c VALUES (?, ?, ?, ?)", rows)
        db.execute("INSERT INTO sessions SELECT c.id, CAST(json_set(CAST(s.header AS TEXT), '$.id', c.id, "
                   "'$.createdAt', s.created_at + c.shift, '$.cwd', c.cwd) AS BLOB), c.cwd, replace(s.title, ?, c.word), "
                   "s.created_at + c.shift, s.updated_at + c.shift FROM sessions s, c WHERE s.id = ?", (MARK, sid))
        db.execute("INSERT INTO events SELECT c.id, e.seq, e.type, e.time + c.shift, CASE WHEN e.type = "
                   "'user/message' THEN CAST(replace(CAST(e.data AS TEXT), ?, c.word) AS BLOB) ELSE e.data END "
                   "FROM events e, c WHERE e.session_id = ?", (MARK, sid))
        db.execute("DELETE FROM events WHERE session_id = ?", (sid,))
        db.execute("DELETE FROM sessions WHERE id = ?", (sid,))
        db.execute("COMMIT")
        db.close()
        return
    import psycopg

    with psycopg.connect(str(where), autocommit=False) as pg:
        _copy_in_postgres(pg, sid, rows)


def build_store(kind: str, folder: Path, n: int) -> tuple[Path | str, float]:
    """The store of `n` copies in `folder` (PostgreSQL: the folder's database, made
    afresh): where it is, and the seconds it took."""
    where = pg_store.location(kind, folder, fresh=True)
    started = time.perf_counter()
    if kind == "jsonl":
        build_jsonl(folder, n)
    else:
        build_sql(kind, where, n)
    return where, time.perf_counter() - started


def _copy_in_postgres(db: Any, sid: str, rows: list[tuple[str, int, str, str]]) -> None:
    """The copies of the template `sid` (PostgreSQL: a COPY of their ids, then one INSERT ... SELECT)."""
    # The copies are written as the agent's own connections write (CHECKED_WRITER): each
    # is the template's checked rows, times shifted and a prompt's word replaced, which
    # a load checks as it checked the template; so the store vouches for them
    # (`checked_seq`), as for every session an agent wrote. "list -n 50 (logs)" measures
    # the list of a store that cannot (written before schema version 3, or by hand).
    from session.backends.postgres_schema import CHECKED_WRITER

    db.execute("SELECT set_config(%s, 'on', true)", (CHECKED_WRITER,))
    db.execute("CREATE TEMP TABLE c (id text, shift bigint, word text, cwd text)")
    with db.cursor() as cursor, cursor.copy("COPY c FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    db.execute("INSERT INTO acp_bridge.sessions (id, header, cwd, title, created_at, updated_at, checked_seq) "
               "SELECT c.id, (s.header::jsonb || jsonb_build_object('id', c.id, "
               "'createdAt', s.created_at + c.shift, 'cwd', c.cwd))::json, c.cwd, replace(s.title, %s, c.word), "
               "s.created_at + c.shift, s.updated_at + c.shift, -1 FROM acp_bridge.sessions s, c WHERE s.id = %s",
               (MARK, sid))
    db.execute("INSERT INTO acp_bridge.events SELECT c.id, e.seq, e.type, e.time + c.shift, CASE WHEN e.type = "
               "'user/message' THEN replace(e.data::text, %s, c.word)::json ELSE e.data END "
               "FROM acp_bridge.events e, c WHERE e.session_id = %s", (MARK, sid))
    db.execute("DELETE FROM acp_bridge.events WHERE session_id = %s", (sid,))
    db.execute("DELETE FROM acp_bridge.sessions WHERE id = %s", (sid,))
    db.commit()
    db.execute("ANALYZE acp_bridge.sessions")  # the planner's figures, as a live store has them
    db.execute("ANALYZE acp_bridge.events")
    db.commit()


@contextlib.contextmanager
def unvouched(where: Path | str, on: bool) -> Iterator[None]:
    """A PostgreSQL store that vouches for no session while on (then as it was)."""
    if not on:
        yield
        return
    import psycopg

    with psycopg.connect(str(where), autocommit=True) as db:
        db.execute("CREATE TABLE acp_bridge.vouched AS SELECT id, checked_seq FROM acp_bridge.sessions")
        db.execute("UPDATE acp_bridge.sessions SET checked_seq = NULL")
    try:
        yield
    finally:
        with psycopg.connect(str(where), autocommit=True) as db:
            db.execute("UPDATE acp_bridge.sessions s SET checked_seq = v.checked_seq FROM acp_bridge.vouched v "
                       "WHERE v.id = s.id")
            db.execute("DROP TABLE acp_bridge.vouched")


def store_bytes(kind: str, where: Path | str, folder: Path) -> int:
    if kind == "postgres":
        with pg_store.server().admin() as db:
            return int(db.execute("SELECT pg_database_size(%s)", (pg_store.name_of(folder),)).fetchone()[0])
    return sum(p.stat().st_size for p in Path(where).rglob("*") if p.is_file() and "index" not in p.parts)


def timed(code: Path, where: Path | str, kind: str, argv: list[str], repeat: int) -> dict[str, Any]:
    """`run_command` `repeat` times: the median's seconds and peak, every time, the load."""
    runs = []
    for _ in range(repeat):
        run = run_command(code, where, kind, argv)
        run["load1"] = os.getloadavg()[0]
        runs.append(run)
        if run["code"]:
            break
    runs.sort(key=lambda r: r["seconds"])
    median = dict(runs[(len(runs) - 1) // 2])
    median.update(all_seconds=[r["seconds"] for r in runs], all_load1=[r["load1"] for r in runs],
                  peak_mb=max(r["peak_mb"] for r in runs), code=max(r["code"] for r in runs))
    return median


def measure(n: int, backends: list[str], scratch: Path, baseline: Path | None,
            repeat: int = 1) -> dict[str, Any]:
    results: dict[str, Any] = {"sessions": n, "runs": [], "stores": {}, "repeat": repeat}
    trees = [("ours", ROOT)] + ([("baseline", baseline)] if baseline is not None else [])
    empty = scratch / "empty"
    empty.mkdir()
    for tree, code in trees:  # the interpreter and the imports of `list`, nothing to read
        run = timed(code, empty, "jsonl", ["list"], max(repeat, 3))
        run.update(backend="-", command="start-up (empty store)", tree=tree)
        results["runs"].append(run)
        print(f"  {tree:<8} {'start-up (empty store)':<22} exit {run['code']}  peak {run['peak_mb']:7.1f} MB  "
              f"{run['seconds']:7.2f} s  load {run['load1']:.2f}", file=sys.stderr)
    for kind in backends:
        folder = scratch / kind
        folder.mkdir()
        where, built = build_store(kind, folder, n)
        size = store_bytes(kind, where, folder)
        results["stores"][kind] = {"bytes": size, "build_seconds": built}
        print(f"{kind}: {n:,} sessions, {size / 1e6:,.0f} MB, written in {built:.0f} s", file=sys.stderr)
        for name, argv in COMMANDS:
            if name == "list -n 50 (logs)" and kind != "postgres":
                continue  # the other stores' list reads the logs anyway
            for tree, code in trees:
                if tree == "baseline" and name not in BASELINE_COMMANDS:
                    continue
                with unvouched(where, name == "list -n 50 (logs)"):
                    run = timed(code, where, kind, argv, 1 if name in ONCE else repeat)
                run.update(backend=kind, command=name, tree=tree)
                results["runs"].append(run)
                print(f"  {tree:<8} {name:<22} exit {run['code']}  peak {run['peak_mb']:7.1f} MB  "
                      f"{run['seconds']:7.2f} s  load {run['load1']:.2f}", file=sys.stderr)
                if run["code"]:
                    print(run["stderr"], file=sys.stderr)
        index_dir = folder / "index"
        if index_dir.exists():
            results["stores"][kind]["index_bytes"] = sum(p.stat().st_size for p in index_dir.iterdir())
        if kind == "postgres":
            pg_store.drop(where)
        shutil.rmtree(folder, ignore_errors=True)
    return results


def _target(command: str) -> float | None:
    if command in DIAGNOSTIC:
        return None
    return next((s for prefix, s in TARGETS.items() if command.startswith(prefix)), None)


def render(results: dict[str, Any]) -> str:
    rows = []
    for run in results["runs"]:
        seconds = _target(run["command"])
        ok = run["code"] == 0 and run["peak_mb"] < TARGET_MB and (seconds is None or run["seconds"] < seconds)
        rows.append([run["backend"], run["command"], run["tree"], f"{run['seconds']:,.2f}",
                     "" if seconds is None else f"< {seconds:g}", f"{run['peak_mb']:,.1f}", f"{run['load1']:.1f}",
                     str(run["code"]), "" if run["tree"] != "ours" or run["command"] in DIAGNOSTIC
                     else "PASS" if ok else "FAIL"])
    return table(["backend", "command", "code", "seconds", "target s", "peak RSS MB", "load", "exit", "verdict"],
                 rows, left=3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--backends", default="jsonl,sqlite,postgres")
    parser.add_argument("--tmp", default=None, help="where the scratch stores go (default: the system's)")
    parser.add_argument("--baseline", type=Path, help="also run `list` with another tree's code")
    parser.add_argument("--json", help="JSON results to PATH")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each command but the first index build (the median is shown)")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="acp-bridge-sessions-scale-", dir=args.tmp))
    load_before = os.getloadavg()
    started = time.time()
    try:
        results = measure(args.sessions, args.backends.split(","), scratch,
                          args.baseline.resolve() if args.baseline else None, max(1, args.repeat))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(), "load_before": load_before,
                          "load_after": os.getloadavg(), "started": time.strftime(
                              "%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), "seconds": time.time() - started,
                          "argv": sys.argv}
    print(render(results))
    machine = results["machine"]
    print(f"load average (1, 5, 15 min) before {', '.join(f'{v:.2f}' for v in machine['load_before'])}, "
          f"after {', '.join(f'{v:.2f}' for v in machine['load_after'])}; {machine['cpus']} CPUs; "
          f"{machine['seconds']:.0f} s in all")
    for kind, info in results["stores"].items():
        print(f"{kind}: store {info['bytes'] / 1e6:,.0f} MB, written in {info['build_seconds']:.0f} s"
              + (f", index {info['index_bytes'] / 1e6:,.0f} MB" if "index_bytes" in info else ""))
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2) + b"\n")
    failed = [r for r in results["runs"] if r["tree"] == "ours" and (
        r["code"] or r["peak_mb"] >= TARGET_MB or r["seconds"] >= (_target(r["command"]) or float("inf")))]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
