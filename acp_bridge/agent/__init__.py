"""The ACP agent: method handlers, settlement, event -> update mapping, replay, the turn runner."""
