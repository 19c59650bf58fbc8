"""Path confinement: every path a tool touches lies inside the session's roots.

A path is relative to the session cwd, or absolute inside one of the roots (cwd and the
additional directories). Two checks, both required:

1. lexical: the normalised absolute path lies under a root as given (so `../x` and
   `/etc/passwd` are refused with a plain message, before the disk is looked at);
2. real: `os.path.realpath` of the path (symlinks resolved; for a file still to be
   created, of its nearest existing parent) lies under the real path of a root, so a
   symlink inside a root that points outside is refused too.

The returned path is the real path re-expressed under the root the session gave
(`root / real.relative_to(realpath(root))`): symlinks inside the roots are followed, so a
write replaces the file a link points to rather than the link, while the prefix stays
the one the client knows (a client may confine its `fs/*` methods to its own root
spelling, e.g. a symlinked home directory).

Not covered: a symlink swapped between this check and the access (TOCTOU). The tools
run on behalf of a model inside the person's own project; the check stops the model
from wandering out by path, not a hostile local process racing it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Literal

from acp_bridge.errors import ToolError
from acp_bridge.tools.base import ToolContext

PathKind = Literal["file", "dir"]


def _roots_text(roots: tuple[Path, ...]) -> str:
    return ", ".join(str(r) for r in roots) or "(none)"


def _under(path: str, root: str) -> bool:
    # commonpath, not startswith: "/a/bc" is not under "/a/b".
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives, or a mix of absolute and relative
        return False


def _outside(path: str, ctx: ToolContext) -> ToolError:
    return ToolError(
        f"path {path!r} is outside the session roots ({_roots_text(ctx.roots)}); "
        "use a path relative to the working directory or inside one of the roots",
        code="outside_roots",
    )


def display_path(path: Path, ctx: ToolContext) -> str:
    """How a title shows a path: relative to the cwd when under it, else absolute."""
    cwd = os.path.abspath(ctx.cwd)
    p = os.path.abspath(path)
    if _under(p, cwd):
        return os.path.relpath(p, cwd)
    return p


def resolve_in_roots(
    path: str,
    ctx: ToolContext,
    *,
    must_exist: bool,
    for_write: bool,
    kind: PathKind = "file",
) -> Path:
    """Resolve a tool's `path` argument to an absolute path inside the roots.

    `kind` says what must be there: a regular file ("file": device files, FIFOs,
    sockets and directories are refused, since reading a FIFO or /dev/zero would hang
    or never end) or a directory ("dir"). With `for_write`, a missing file is fine as
    long as its parent directory exists inside the roots. Raises ToolError with code
    `invalid_path`, `outside_roots`, `not_found`, `not_a_file` or `not_a_directory`.
    """
    if not isinstance(path, str) or not path:
        raise ToolError("path must be a non-empty string", code="invalid_path")
    if "\0" in path:
        raise ToolError(f"path {path!r} contains a NUL byte", code="invalid_path")

    roots = [os.path.abspath(r) for r in ctx.roots]
    lexical = os.path.abspath(os.path.join(ctx.cwd, path))  # join keeps absolute paths
    root_index = next((i for i, r in enumerate(roots) if _under(lexical, r)), None)
    if root_index is None:
        raise _outside(path, ctx)

    real = os.path.realpath(lexical)
    real_roots = [os.path.realpath(r) for r in roots]
    # Prefer the root the lexical path named; fall back to any root (a link from one
    # root into another is fine).
    order = [root_index, *(i for i in range(len(roots)) if i != root_index)]
    home = next((i for i in order if _under(real, real_roots[i])), None)
    if home is None:
        raise ToolError(
            f"path {path!r} resolves to {real}, which is outside the session roots "
            f"({_roots_text(ctx.roots)}) through a symbolic link",
            code="outside_roots",
        )
    result = Path(roots[home]) / os.path.relpath(real, real_roots[home])
    result = Path(os.path.normpath(result))

    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise ToolError(f"cannot access {path!r}: {e.strerror}", code="not_found") from e

    if st is None:
        if must_exist or not for_write:
            raise ToolError(f"{path!r} does not exist ({result})", code="not_found")
        if kind == "dir":
            raise ToolError(f"{path!r} is not an existing directory", code="not_found")
        parent = os.path.dirname(real)
        if not os.path.isdir(parent):
            raise ToolError(
                f"the parent directory of {path!r} ({os.path.dirname(result)}) does not "
                "exist; create it first",
                code="not_found",
            )
        return result

    if kind == "dir":
        if not stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{path!r} is not a directory ({result})", code="not_a_directory")
    elif not stat.S_ISREG(st.st_mode):
        what = "a directory (use list_dir)" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise ToolError(f"{path!r} is {what} ({result})", code="not_a_file")
    return result
