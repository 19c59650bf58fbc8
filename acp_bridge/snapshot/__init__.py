"""Snapshot tests of ACP traffic from recorded sessions (docs/snapshots.md).

A scenario folder holds a client script (`scenario.json`), an optional `workspace/`, and
what `record` wrote: the recorded session log and the normalized traffic golden.
`check` replays it through the real stdio agent with `replay:` as the model and compares
both surfaces. The agent is only ever run as a subprocess.

    from acp_bridge.snapshot import check, replay
    check(Path("tests/recorded/text_turn"))                 # raises SnapshotMismatch
    assert replay(Path("tests/recorded/text_turn")).traffic == snapshot   # syrupy
"""

from __future__ import annotations

from pathlib import Path

from acp_bridge.errors import ScenarioError, SnapshotMismatch
from acp_bridge.snapshot.harness import Replayed, check, record, replay
from acp_bridge.snapshot.scenario import Scenario, load_scenario

__all__ = [
    "Replayed",
    "Scenario",
    "ScenarioError",
    "SnapshotMismatch",
    "check",
    "load_scenario",
    "record",
    "replay",
    "scenario_folders",
]


def scenario_folders(root: Path | str) -> list[Path]:
    """`root` if it is a scenario folder, else the scenario folders in it (those holding
    a scenario.json), sorted: for `pytest.mark.parametrize` and the command line."""
    base = Path(root)
    if (base / "scenario.json").is_file():
        return [base]
    return sorted(p.parent for p in base.glob("*/scenario.json"))
