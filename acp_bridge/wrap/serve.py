"""`acp-bridge wrap`: the wrapper's engine behind the host, on our stdio.

The child is spawned before anything is read from the editor, so a command that cannot
be run is refused at once (one line on stderr, exit status 2), as any bad start-up
value is (DESIGN.md section 6). The command line spawns it first of all (`start_child`,
which imports nothing heavy), before `serve` imports the wrapper: the child boots while
the wrapper imports (issue 23, start-up; bench/README.md).
"""

from __future__ import annotations

import sys

from acp_bridge.wrap.spawn import Early

__all__ = ["Early", "greet", "serve", "start_child"]

TYPE_CHECKING = False  # typing's, without importing typing here (mypy takes any TYPE_CHECKING as True)

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from acp_bridge.host.host import Host
    from acp_bridge.wrap.turns import WrappedTurns


def start_child(argv: list[str]) -> Early:
    """The wrapped agent's first process, started now; `serve` takes it over (and the
    start-up handshake with it, `greet`)."""
    return Early(argv)


def greet(early: Early, agents: list[str] | None, *, held: bool = False) -> None:
    """Begin the start-up handshake with `early`'s process (acp_bridge.wrap.handshake),
    through the process's tuning, which the host then takes over."""
    from acp_bridge.host.tuning import ProcessTuning

    early.greet(agents, ProcessTuning(), held=held)


def serve(args: argparse.Namespace, early: Early | None = None) -> int:
    try:
        host, not_started = _host(args, early)
    finally:
        # The handshake ends here (or on a failure to build the host), before the host
        # reads stdin or writes stdout: what it read is read first, and the host starts
        # where it left off.
        greeting = early.finish() if early is not None else None
    from acp_bridge.host.stdio import serve_stdio

    if greeting is None:
        return serve_stdio(host, not_started=not_started)
    import logging

    log = logging.getLogger("acp_bridge.wrap")
    if greeting.failure is not None:
        log.warning("the start-up handshake stopped: %s", greeting.failure)
    log.debug("the start-up handshake: %s", {"none": "not used", "sent": "initialize sent, the host answers it",
                                             "done": "initialize answered"}[greeting.state])
    return serve_stdio(host, not_started=not_started, prefix=greeting.editor_rest,
                       answered_first=greeting.state == "done")


def _host(args: argparse.Namespace, early: Early | None) -> tuple[Host[WrappedTurns], Callable[[OSError], int]]:
    """The wrapper's host (the heavy imports are here), and what it answers when the
    child cannot be spawned."""
    from acp_bridge import __version__
    from acp_bridge.host.host import Host, StoreSpec
    from acp_bridge.host.stdio import configure_logging
    from acp_bridge.host.tuning import ProcessTuning
    from acp_bridge.wrap.engine import WrapConfig, WrapEngine
    from session import shown_store, store_location

    configure_logging(args.log_file, args.log_level)
    agents: list[tuple[str | None, list[str]]] = list(getattr(args, "agents", None) or []) \
        or [(None, list(args.wrapped))]
    configs = [WrapConfig(store_dir=store_location(args.backend, args.store), command=command,
                          cancel_grace=args.cancel_grace, backend=args.backend,
                          seed_fresh=bool(getattr(args, "seed_fresh", False)), name=name) for name, command in agents]
    config = configs[0]
    # One line on stderr, never stdout (stdout carries protocol messages only).
    shown = ", ".join(f"{c.name}={' '.join(c.command)}" for c in configs) if config.name else " ".join(config.command)
    print(f"acp-bridge {__version__}: wrapping {shown}, store {shown_store(config.store_dir)} "
          f"({config.backend})", file=sys.stderr, flush=True)
    # `--agent`: several agents, a session handed between them (acp_bridge.wrap.moves);
    # the early child is the default agent's.
    engine = WrapEngine(configs, early=early)
    tuning = early.tuning if early is not None and early.tuning is not None else ProcessTuning()
    host: Host[WrappedTurns] = Host(engine, StoreSpec(config.store_dir, config.backend), tuning=tuning)

    def not_started(exc: OSError) -> int:  # the child cannot be spawned
        print(f"acp-bridge: cannot run {config.command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2

    return host, not_started
