"""A real PostgreSQL server for the tests and the benches, started in a throw-away folder
(the tests reach it through tests/support/pg_server.py, their fixture side).

The binaries come from `pgserver` (PyPI, in the `test` extra: PostgreSQL 16 in a
wheel), else from `$ACP_BRIDGE_TEST_PG_BIN`, else from Debian's `postgresql` package.
The server runs as an unprivileged user when we are root (PostgreSQL refuses root),
listens on a Unix socket in its folder and on a free loopback port (password auth
there, for the redaction tests), and is stopped and deleted at the end.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib.util
import itertools
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PASSWORD = "pw-Sekr1t-9f3a"  # the role's password on the loopback port (tests look for it)
_names = itertools.count()


def find_bin_dir() -> Path | None:
    given = os.environ.get("ACP_BRIDGE_TEST_PG_BIN")
    if given:
        return Path(given) if (Path(given) / "pg_ctl").exists() else None
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.origin is not None:
        candidate = Path(spec.origin).parent / "pginstall" / "bin"
        if (candidate / "pg_ctl").exists():
            return candidate
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(debian[-1]).parent if debian else None


def missing_reason() -> str:
    return ("no PostgreSQL server binaries: install the test extra (pip install -e '.[test]' "
            "brings pgserver) or set ACP_BRIDGE_TEST_PG_BIN; the PostgreSQL backend is NOT tested")


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    bin_dir: Path
    root: Path  # the throw-away folder: data/ and the socket live here
    port: int
    user: str | None  # the system user the server runs as (None: ourselves)
    fsync: bool

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _run(self, tool: str, *args: str, timeout: float = 60) -> None:
        subprocess.run([str(self.bin_dir / tool), *args], check=True, user=self.user,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)

    def init(self) -> None:
        self.data.mkdir(parents=True)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            for path in (self.root, self.data):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD)
        if self.user is not None:
            os.chown(pwfile, pwd.getpwnam(self.user).pw_uid, -1)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                  "--auth-host=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8",
                  "--no-instructions")
        pwfile.unlink()

    def start(self) -> None:
        options = (f"-k {self.root} -h 127.0.0.1 -p {self.port} -c max_connections=200 "
                   f"-c shared_buffers=64MB -c fsync={'on' if self.fsync else 'off'} "
                   f"-c full_page_writes={'on' if self.fsync else 'off'}")
        self._run("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.root / "server.log"),
                  "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-m", mode, "stop")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def dsn(self, dbname: str = "postgres") -> str:
        """The Unix-socket connection string (trust auth)."""
        return f"postgresql://postgres@/{dbname}?host={self.root}&port={self.port}"

    def tcp_dsn(self, dbname: str = "postgres", password: str = PASSWORD) -> str:
        """Over loopback TCP, with the password in the string (scram-sha-256)."""
        return f"postgresql://postgres:{password}@127.0.0.1:{self.port}/{dbname}"

    def admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.dsn(), autocommit=True)

    def new_database(self) -> str:
        """A fresh, empty database; its connection string."""
        name = f"t{os.getpid()}_{next(_names)}"
        with self.admin() as db:
            db.execute(f"CREATE DATABASE {name} TEMPLATE template0 STRATEGY file_copy")
        return self.dsn(name)

    def emptied(self, dsn: str) -> str:
        """The database of `dsn` made empty again (no acp_bridge schema, nobody else
        connected): as good as a fresh one, at a fraction of CREATE DATABASE's cost."""
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            db.execute("DROP SCHEMA IF EXISTS acp_bridge CASCADE")
        return dsn

    def remove(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def _server_user() -> str | None:
    """PostgreSQL will not run as root: an unprivileged user that exists everywhere."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise RuntimeError("running as root and no unprivileged user (postgres, nobody) to run PostgreSQL as")


def _others_can_run(tool: Path) -> bool:
    """Whether a user other than the owner can reach and run `tool`: every folder above
    it searchable by others, the file executable by them."""
    path = tool.resolve()
    if not path.exists() or not path.stat().st_mode & stat.S_IXOTH:
        return False
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in path.parents)


def _shared_copy(install: Path) -> Path:
    """The PostgreSQL install (bin/, lib/, share/) copied where the unprivileged server
    user can run it: a clone in a private folder (`mktemp -d` is 0700, as .ci/run's is)
    has its virtual environment out of that user's reach. The copy keeps the wheel's
    layout (`pgserver/pginstall` beside `pgserver.libs`: the binaries find their
    libraries by a relative RPATH). One copy per install path and version, kept in /tmp
    and reused; made in a temporary folder, then renamed into place."""
    key = hashlib.sha1(f"{install.resolve()}:{(install / 'bin' / 'postgres').stat().st_mtime_ns}".encode())
    target = Path("/tmp") / f"acp-pg-install-{key.hexdigest()[:16]}"
    inside = Path(install.parent.name) / install.name  # pgserver/pginstall
    if (target / inside / "bin" / "initdb").exists():
        return target / inside
    staging = Path(tempfile.mkdtemp(prefix="acp-pg-install-", dir="/tmp"))
    try:
        tree = staging / "install"
        shutil.copytree(install, tree / inside, symlinks=True)
        libs = install.parent.parent / f"{install.parent.name}.libs"  # auditwheel's folder
        if libs.is_dir():
            shutil.copytree(libs, tree / libs.name, symlinks=True)
        for folder in (tree, tree / inside.parent):
            os.chmod(folder, 0o755)
        with contextlib.suppress(OSError):  # another run made it first: use theirs
            os.rename(tree, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target / inside


def start_server(*, fsync: bool = False) -> PgServer:
    """Init and start a server in a new temporary folder (fsync off for the tests: they
    check what reaches the server, not what survives a power cut; the bench keeps it)."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise FileNotFoundError(missing_reason())
    user = _server_user()
    if user is not None and not _others_can_run(bin_dir / "initdb"):
        bin_dir = _shared_copy(bin_dir.parent) / "bin"
    # Another user must reach the folder: /tmp, not a private $TMPDIR, when we are root.
    root = Path(tempfile.mkdtemp(prefix="acp-pg-", dir="/tmp" if user and os.path.isdir("/tmp") else None))
    server = PgServer(bin_dir, root, _free_port(), user, fsync)
    try:
        server.init()
        server.start()
    except subprocess.CalledProcessError as exc:
        log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
        server.remove()
        raise RuntimeError(f"PostgreSQL did not start: {exc.stderr.decode(errors='replace')}{log}") from exc
    except BaseException:
        server.remove()
        raise
    return server

