"""Text from outside (a model, a tool, a log) made safe to print at a terminal: control
characters shown escaped (`\\x1b`), so an escape sequence in model output or in a
command's output can never clear the screen, move the cursor, set the title or hide
text. Tabs and newlines are kept. Shared by `chat`, `sessions` and `demo`.
"""

from __future__ import annotations

from typing import Any

_CONTROL: dict[int, str] | None = None


def clean(text: str) -> str:
    """Text from the log with control characters made visible (tabs and newlines kept)."""
    global _CONTROL
    if _CONTROL is None:
        codes = [*range(0x20), 0x7F, *range(0x80, 0xA0)]
        _CONTROL = {c: f"\\x{c:02x}" for c in codes if c not in (0x09, 0x0A)}
    return text.replace("\r\n", "\n").translate(_CONTROL)


def cleaned(value: Any) -> Any:
    """`value` (JSON from the agent) with every string in it `clean`ed."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {k: cleaned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [cleaned(v) for v in value]
    return value


def guarded(text: str, own: tuple[str, ...] = ()) -> str:
    """`text` about to be written to a terminal, every control character in it escaped
    except the program's `own` styling sequences (exactly these strings): the last
    check before the bytes leave, whatever path the text took."""
    if not own:
        return clean(text)
    import re

    parts = re.split("(" + "|".join(re.escape(seq) for seq in own) + ")", text)
    return "".join(part if part in own else clean(part) for part in parts)
