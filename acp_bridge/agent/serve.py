"""`acp-bridge serve`: our agent's engine behind the host, on stdio."""

from __future__ import annotations

import argparse
import sys

from acp_bridge import __version__
from acp_bridge.agent.engine import AgentEngine, Config
from acp_bridge.agent.live import LiveSession
from acp_bridge.host.host import Host, StoreSpec
from acp_bridge.host.stdio import configure_logging, serve_stdio
from acp_bridge.host.tuning import ProcessTuning
from acp_bridge.models.catalog import parse_specs
from session import shown_store, store_location


def serve(args: argparse.Namespace) -> int:
    """Serve until the editor closes stdin. `args` holds values the command line has
    already checked (acp_bridge.cli.startup.agent_settings)."""
    configure_logging(args.log_file, args.log_level)
    models = parse_specs(args.model)  # checked at start-up: a list of one or more specs
    if any(m.kind == "replay" for m in models):
        from acp_bridge.models.replay_models import offered

        # A recording is offered as the models it ran (checked at start-up too).
        models = offered(models, store_dir=store_location(args.backend, args.store), backend=args.backend)
    config = Config(store_dir=store_location(args.backend, args.store),
                    backend=args.backend, models=models, max_steps=args.max_steps,
                    prices=getattr(args, "prices", None))
    # One line on stderr, never stdout (stdout carries protocol messages only).
    print(f"acp-bridge {__version__}: store {shown_store(config.store_dir)} ({config.backend}), "
          f"model {', '.join(m.spec for m in models)}", file=sys.stderr, flush=True)
    host: Host[LiveSession] = Host(AgentEngine(config), StoreSpec(config.store_dir, config.backend),
                                   tuning=ProcessTuning())
    return serve_stdio(host)
