"""`acp-bridge sessions fork ID [--at-turn N]`: a new session holding the turns of ID (up
to turn N), made as the agent's `session/fork` makes one (session.fork: the original
read without its owner lock and never written, the fork published whole or not at all,
an interrupted last turn closed in the fork as a load would close it). The fork's roots
are the original's; its id is printed, and it loads in any agent on the store
(`chat --load ID`, an editor's `session/load`). The one `sessions` command that writes
the store (a new session only)."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path


def fork(backend: str, location: Path | str, session_id: str, at_turn: int | None, *,
         shown: str | None = None) -> str:
    """Fork `session_id` in the store; the new session's id. Raises the SessionError
    family (ForkTurnError for a turn it cannot end at). With `shown` (the label), a
    terminal's stderr shows the time the copy takes (it is the store's, counting nothing
    we see: progress.py), erased when it is done."""
    from acp_bridge.cli.sessions.progress import Progress, on_terminal
    from session import SessionStore, open_backend

    progress = Progress(shown or "", enabled=shown is not None and on_terminal())
    progress.tick(f"copying session {session_id}")
    store = SessionStore(open_backend(backend, location))
    try:
        plan = store.plan_fork(session_id, at_turn=at_turn)
        source = plan.source
        header = store.fork(plan, cwd=source["cwd"], additional_directories=source.get("additionalDirectories", ()))
    finally:
        store.close()
        progress.done()
    return header["id"]
