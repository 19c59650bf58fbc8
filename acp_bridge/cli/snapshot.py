"""`acp-bridge snapshot record|check DIR...`: recorded sessions as snapshot tests
(docs/snapshots.md). DIR is a scenario folder or a folder of them.

    acp-bridge snapshot record DIR... [--model SPEC]... run against a real model; write the goldens
    acp-bridge snapshot check DIR... [--update]        replay offline; compare; exit 1 on a difference
    acp-bridge snapshot fake-agent LOG                 serve a recorded session as an ACP agent on stdio
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="acp-bridge snapshot",
                                     description="Record ACP scenarios against a model; check them offline by replay.")
    commands = parser.add_subparsers(dest="action", required=True)
    rec = commands.add_parser("record", help="run scenarios against a real model and write their goldens")
    rec.add_argument("dirs", nargs="+", type=Path, metavar="DIR")
    rec.add_argument("--model", action="append", default=None,
                     help="the model to record with, repeated to offer several, the first the default "
                     "(default: the scenario's \"model\")")
    chk = commands.add_parser("check", help="replay scenarios (no network, no key) and compare with the goldens")
    chk.add_argument("dirs", nargs="+", type=Path, metavar="DIR")
    chk.add_argument("--update", action="store_true", help="write the goldens from this run instead of comparing")
    fake = commands.add_parser("fake-agent", help="serve a recorded session (a log file or a stored session id) "
                               "as an ACP agent on stdio, for client tests")
    fake.add_argument("log", metavar="LOG")
    args = parser.parse_args(argv)
    if args.action == "fake-agent":
        from acp_bridge.snapshot.fake_agent import serve

        return serve(args.log)

    from acp_bridge.errors import ScenarioError, SnapshotMismatch
    from acp_bridge.snapshot import check, record, scenario_folders

    folders = [folder for given in args.dirs for folder in scenario_folders(given)]
    if not folders:
        print(f"acp-bridge snapshot: no scenario folder (with a scenario.json) in {', '.join(map(str, args.dirs))}",
              file=sys.stderr)
        return 2
    failed = 0
    for folder in folders:
        try:
            if args.action == "record":
                record(folder, model=args.model)
                print(f"recorded {folder}")
            else:
                check(folder, update=args.update)
                print(f"{'updated' if args.update else 'ok'} {folder}")
        except (ScenarioError, SnapshotMismatch) as exc:
            failed += 1
            print(f"FAILED {folder}: {exc}", file=sys.stderr)
    if len(folders) > 1 or failed:
        print(f"{len(folders) - failed} of {len(folders)} scenarios {'recorded' if args.action == 'record' else 'passed'}")
    return 1 if failed else 0
