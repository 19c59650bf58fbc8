"""The terminal programs: `serve`'s command line, `chat`, `sessions` and `demo`."""
