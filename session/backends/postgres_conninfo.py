"""Where a PostgreSQL store is, and how it is shown: the connection string given by
`--store` or `$ACP_BRIDGE_POSTGRES` (else libpq's own `PG*` variables and service
file), and that string with its password taken out.

Pure string work, no driver import: the command line checks and shows a store without
loading psycopg, and nothing that reaches a log, an error or `sessions` output carries
a password (`redact`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

ENV_VAR = "ACP_BRIDGE_POSTGRES"
HIDDEN = "***"

_URI = re.compile(r"^(postgres(?:ql)?://)([^/?#]*)(.*)$", re.IGNORECASE | re.DOTALL)
# key = value, the value bare or single-quoted with backslash escapes (libpq's syntax)
_PASSWORD_KV = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)", re.IGNORECASE)
_PASSWORD_PARAM = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def is_uri(conninfo: str) -> bool:
    return _URI.match(conninfo.strip()) is not None


def resolve(option: str | None, environ: Mapping[str, str]) -> str:
    """The connection string to use: `--store`, else `$ACP_BRIDGE_POSTGRES`, else ""
    (an empty string lets libpq take everything from `PGHOST`, `PGDATABASE`,
    `PGSERVICE`, ~/.pgpass and the other `PG*` variables)."""
    if option:
        return option
    return environ.get(ENV_VAR, "")


def problem(conninfo: str) -> str | None:
    """Why `conninfo` cannot be a connection string (a folder given by mistake), or
    None. Only the shape is checked here; libpq parses it at the first connection."""
    text = conninfo.strip()
    if not text or is_uri(text) or "=" in text:
        return None
    return (f"{redact(text)!r} is not a PostgreSQL connection string: give "
            "postgresql://USER@HOST/DBNAME or 'host=... dbname=...' "
            f"(or set ${ENV_VAR}, or libpq's PG* variables)")


def redact(conninfo: str) -> str:
    """`conninfo` with any password replaced by ***, in either syntax."""
    match = _URI.match(conninfo)
    if match is not None:
        scheme, netloc, rest = match.groups()
        user, at, hosts = netloc.rpartition("@")
        if at and ":" in user:
            netloc = f"{user.split(':', 1)[0]}:{HIDDEN}@{hosts}"
        return scheme + netloc + _PASSWORD_PARAM.sub(rf"\g<1>{HIDDEN}", rest)
    return _PASSWORD_KV.sub(rf"\g<1>{HIDDEN}", conninfo)


def shown(conninfo: str) -> str:
    """A store for people to read: the redacted string, or where libpq will look."""
    return redact(conninfo) if conninfo.strip() else "postgres (libpq defaults: PG* variables)"


def scrub(message: str, conninfo: str) -> str:
    """A driver message with the password of `conninfo` (and any conninfo it quotes)
    taken out: libpq does not print passwords, but a message may echo the string."""
    secret = password(conninfo)
    if secret:
        message = message.replace(secret, HIDDEN)
    return redact(message) if "password" in message.lower() or "://" in message else message


def has_password(conninfo: str) -> bool:
    """Whether `conninfo` holds a password (in either syntax)."""
    return password(conninfo) is not None


def password(conninfo: str) -> str | None:
    """The password `conninfo` holds, in either syntax, or None."""
    match = _URI.match(conninfo)
    if match is not None:
        user = match.group(2).rpartition("@")[0]
        if ":" in user:
            return user.split(":", 1)[1] or None
        param = _PASSWORD_PARAM.search(match.group(3))
        return param.group(0).split("=", 1)[1] or None if param else None
    kv = _PASSWORD_KV.search(conninfo)
    if kv is None:
        return None
    value = kv.group(2)
    if value.startswith("'"):
        value = re.sub(r"\\(.)", r"\1", value[1:-1] if value.endswith("'") else value[1:])
    return value or None
