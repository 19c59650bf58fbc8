"""`acp-bridge login`: ask for the API key of `openai:` models, check it with the
provider (`OPENAI_BASE_URL`), and store it for the agent (0600).

Also what an editor runs for the `terminal` auth method: the agent's own command with
`ACP_BRIDGE_LOGIN=1` (acp_bridge.agent.auth). The key is read without echo from the
terminal, or as one line from stdin when stdin is not a terminal; it is never printed.
Exit status 0 when the key was stored, 1 otherwise. `OPENAI_BASE_URL` is checked
before the key is asked for (an endpoint that cannot work stores nothing).
`login --remove` removes the stored key (the file; exit 0 also when there was none).
"""

from __future__ import annotations

import argparse
import getpass
import sys

import anyio

from acp_bridge.models.openai_env import base_url, url_problem
from acp_bridge.models.openai_key import check_key, key_file, key_problem, save_key


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="acp-bridge login", description=__doc__.split("\n\n")[0])
    parser.add_argument("--remove", action="store_true", help="remove the stored key (the file) instead")
    args = parser.parse_args(argv)
    if args.remove:
        return remove()
    url = base_url()
    problem = url_problem(url)
    if problem is not None:  # checked before a key is asked for, and never stored for it
        print(f"acp-bridge login: {problem}; nothing stored", file=sys.stderr)
        return 1
    prompt = f"API key for {url} (input hidden): "
    try:
        key = getpass.getpass(prompt) if sys.stdin.isatty() else sys.stdin.readline()
    except (EOFError, KeyboardInterrupt):
        print("\nacp-bridge login: no key given", file=sys.stderr)
        return 1
    key = key.strip()
    problem = key_problem(key)
    if problem is not None:
        print(f"acp-bridge login: {problem}; nothing stored", file=sys.stderr)
        return 1
    checked = anyio.run(check_key, url, key)
    if not checked.ok:
        print(f"acp-bridge login: {checked.message}; nothing stored", file=sys.stderr)
        return 1
    path = save_key(key)
    print(f"acp-bridge login: key stored in {path} (readable by you only); {checked.message}")
    return 0


def remove() -> int:
    """`login --remove`: the key file gone (0 also when there was none: the end state is
    the same, and said); `OPENAI_API_KEY`, which wins over the file, is named if set."""
    import os

    path = key_file()
    try:
        path.unlink()
    except FileNotFoundError:
        print(f"acp-bridge login: no stored key at {path}; nothing to remove")
    except OSError as exc:
        print(f"acp-bridge login: cannot remove {path}: {exc.strerror}", file=sys.stderr)
        return 1
    else:
        print(f"acp-bridge login: key removed from {path}")
    if os.environ.get("OPENAI_API_KEY"):
        print("acp-bridge login: OPENAI_API_KEY is still set in this environment (and wins over a stored key)",
              file=sys.stderr)
    return 0
