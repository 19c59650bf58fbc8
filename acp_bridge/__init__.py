"""acp-bridge: an Agent Client Protocol agent with a durable session log."""

from __future__ import annotations

__version__ = "0.1.0"
