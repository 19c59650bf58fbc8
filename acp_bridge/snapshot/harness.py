"""`record` and `check` of a scenario folder (docs/snapshots.md).

`record` runs the scenario against a real model and writes the recorded session log
(`session.jsonl`, the session cwd written as `<cwd>`) and the normalized traffic golden
(`traffic.jsonl`). `check` runs it again with `replay:session.jsonl` as the model, no key
and no provider endpoint in the agent's environment, and compares two surfaces: the
normalized traffic with `traffic.jsonl`, and the re-persisted log with the recording
(or with `replayed.jsonl` where an overrides file makes the run differ from the
recording on purpose). A difference raises SnapshotMismatch with a readable diff.
"""

from __future__ import annotations

import difflib
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import orjson

from acp_bridge.errors import ScenarioError, SnapshotMismatch
from acp_bridge.snapshot.driver import Run, agent_command, agent_env, drive
from acp_bridge.snapshot.normalize import dump_lines, normalize_log, normalize_traffic, scrub_paths
from acp_bridge.snapshot.scenario import (
    OVERRIDES_FILE,
    RECORDING_FILE,
    REPLAYED_FILE,
    TRAFFIC_FILE,
    WORKSPACE_DIR,
    Scenario,
    load_scenario,
)

CWD_TOKEN = "<cwd>"
DIFF_LINES = 120  # lines of a diff shown in an error at most


@dataclass(frozen=True)
class Replayed:
    """What a run gave, normalized: the two surfaces a check compares."""

    traffic: list[dict[str, Any]]
    log: list[dict[str, Any]]
    stderr: str


def run_scenario(scenario: Scenario, model: Sequence[str], *, offline: bool,
                 environ: Mapping[str, str] | None = None) -> tuple[Replayed, bytes]:
    """Run `scenario` with `model` in a fresh temporary folder (its `workspace/` copied
    in as the session cwd). Returns the normalized surfaces and the raw session log,
    with the cwd and the run's folder scrubbed."""
    root = Path(tempfile.mkdtemp(prefix="acp-snapshot-")).resolve()
    try:
        workspace = root / "work"
        if scenario.path(WORKSPACE_DIR).is_dir():
            shutil.copytree(scenario.path(WORKSPACE_DIR), workspace, symlinks=True)
        else:
            workspace.mkdir()
        run = Run(root=root, workspace=workspace, store=root / "store",
                  hold_expectations=offline or not scenario.path(OVERRIDES_FILE).exists())
        env = agent_env(os.environ if environ is None else environ, scenario, offline=offline)
        try:
            anyio.run(drive, scenario, run, agent_command(run, model, scenario), env)
        except BaseExceptionGroup as group:  # a task's error, raised through the task group
            first = _first(group)
            if first is not None:
                raise first from None
            raise
        # The run's folders, and (in a wrapped agent's command line) this Python and
        # the scenario folder: nothing of this machine stays in a golden.
        paths = [(str(workspace), CWD_TOKEN), (str(root), "<tmp>"), (sys.executable, "<python>"),
                 (str(scenario.folder.resolve()), "<scenario>")]
        log_path = run.log_path
        if log_path is None or not log_path.exists():
            raise ScenarioError(f"{scenario.name}: the run recorded no session")
        raw = scrub_paths(log_path.read_text(encoding="utf-8"), paths).encode()
        replayed = Replayed(normalize_traffic(run.traffic, paths), normalize_log(raw.splitlines(), paths),
                            run.stderr)
        return replayed, raw
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _first(group: BaseExceptionGroup[Any]) -> BaseException | None:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found = _first(exc)
            if found is not None:
                return found
        elif isinstance(exc, ScenarioError | OSError):
            return exc
    return None


def record(folder: Path, *, model: str | Sequence[str] | None = None,
           environ: Mapping[str, str] | None = None) -> Replayed:
    """Run the scenario against a real model (or several: the agent offers them all, the
    first the default); write `session.jsonl` and `traffic.jsonl` (and drop a
    `replayed.jsonl` of an earlier recording, which no longer applies). With overrides,
    or for a wrap scenario, the goldens are then written by a replay."""
    scenario = load_scenario(folder)
    given = [model] if isinstance(model, str) else list(model or ())
    specs = given or list(scenario.model) or (["wrapped"] if scenario.wrap else [])
    if not specs:
        raise ScenarioError(f"{folder}: no model to record with: pass --model or set \"model\" in the scenario")
    for spec in specs:
        if spec.startswith("replay:"):
            raise ScenarioError(f"{folder}: record with a real model, not {spec} (check replays)")
    replayed, raw = run_scenario(scenario, specs, offline=False, environ=environ)
    scenario.path(RECORDING_FILE).write_bytes(raw)
    scenario.path(TRAFFIC_FILE).write_bytes(dump_lines(replayed.traffic))
    scenario.path(REPLAYED_FILE).unlink(missing_ok=True)
    if scenario.wrap or scenario.path(OVERRIDES_FILE).exists():
        # Overrides change the run on purpose, and the fake agent is not the recorded
        # agent (its initialize answer, for one, is not in the log): the goldens are
        # then the replay's.
        return check(folder, update=True, environ=environ)
    return replayed


def replay(folder: Path, *, environ: Mapping[str, str] | None = None) -> Replayed:
    """Run the scenario with its recording as the model (no key, no endpoint)."""
    scenario = load_scenario(folder)
    recording = scenario.path(RECORDING_FILE)
    if not recording.is_file():
        raise ScenarioError(f"{folder}: no {RECORDING_FILE}: record it first (acp-bridge snapshot record {folder})")
    return run_scenario(scenario, [replay_spec(scenario, recording.resolve())], offline=True, environ=environ)[0]


def replay_spec(scenario: Scenario, recording: Path) -> str:
    """`replay:RECORDING`: the path whole (a `replay:` spec takes no flags). The models
    it is offered as, with their flags, come from the scenario (`agent_env`)."""
    return f"replay:{recording}"


def check(folder: Path, *, update: bool = False, environ: Mapping[str, str] | None = None) -> Replayed:
    """Replay the scenario and compare both surfaces with the goldens; raise
    SnapshotMismatch with a diff. With `update`, write the goldens from this run
    instead (`traffic.jsonl`; `replayed.jsonl` where overrides are used)."""
    scenario = load_scenario(folder)
    replayed = replay(folder, environ=environ)
    overridden = scenario.path(OVERRIDES_FILE).exists()
    if update:
        scenario.path(TRAFFIC_FILE).write_bytes(dump_lines(replayed.traffic))
        if overridden:
            scenario.path(REPLAYED_FILE).write_bytes(dump_lines(replayed.log))
        else:
            scenario.path(REPLAYED_FILE).unlink(missing_ok=True)
        return replayed
    problems = []
    traffic_golden = scenario.path(TRAFFIC_FILE)
    if not traffic_golden.is_file():
        raise ScenarioError(f"{folder}: no {TRAFFIC_FILE}: record the scenario (acp-bridge snapshot record {folder})")
    want_traffic = _read_lines(traffic_golden)
    if want_traffic != replayed.traffic:
        problems.append(f"the traffic differs from {TRAFFIC_FILE}:\n" + diff(want_traffic, replayed.traffic))
    log_golden = scenario.path(REPLAYED_FILE)
    if log_golden.is_file():
        want_log, against = _read_lines(log_golden), REPLAYED_FILE
    else:
        want_log = normalize_log(scenario.path(RECORDING_FILE).read_bytes().splitlines(), [])
        against = f"the recording ({RECORDING_FILE})"
    if want_log != replayed.log:
        problems.append(f"the re-persisted log differs from {against}:\n" + diff(want_log, replayed.log))
    if problems:
        stderr = replayed.stderr.strip()
        tail = f"\nthe agent's stderr:\n{stderr[-1500:]}" if stderr else ""
        raise SnapshotMismatch(
            f"snapshot {folder.name}: " + "\n".join(problems)
            + f"\n(- golden, + this run; if the change is intended: acp-bridge snapshot check --update {folder}, "
            f"or record again: acp-bridge snapshot record {folder}){tail}")
    return replayed


def _read_lines(path: Path) -> list[Any]:
    try:
        return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    except orjson.JSONDecodeError as exc:
        raise ScenarioError(f"{path}: a line is not JSON ({exc}); record again") from None


def diff(want: list[Any], got: list[Any]) -> str:
    """The differences of two lists of JSON values (messages or events): which entries
    were added or dropped (one line each), and for an entry that changed, a unified diff
    of its fields, headed by its index in each list."""
    def compact(value: Any) -> str:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()

    def pretty(value: Any) -> list[str]:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2).decode().splitlines()

    out: list[str] = []
    matcher = difflib.SequenceMatcher(None, [compact(v) for v in want], [compact(v) for v in got], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        pairs = min(i2 - i1, j2 - j1) if op == "replace" else 0
        for k in range(pairs):
            out.append(f"@ golden #{i1 + k}, this run #{j1 + k}:")
            out += list(difflib.unified_diff(pretty(want[i1 + k]), pretty(got[j1 + k]), n=2, lineterm=""))[2:]
        out += [f"- golden #{i}: {compact(want[i])}" for i in range(i1 + pairs, i2)]
        out += [f"+ this run #{j}: {compact(got[j])}" for j in range(j1 + pairs, j2)]
    if len(out) > DIFF_LINES:
        out = [*out[:DIFF_LINES], f"... ({len(out) - DIFF_LINES} more lines)"]
    return "\n".join(out)
