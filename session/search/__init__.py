"""The search index of a store (docs/search.md): every turn's facts (tokens, model, how
it ended) and texts (prompt, thoughts, answers, tool calls and their output), kept
beside the store and brought up to date from where it left off. `base` holds the rows,
the filters and the protocol; `query` the query language and the snippets; `fts` the SQLite FTS5 file of the file stores;
`pg` the PostgreSQL tables (full-text search over a GIN index) of a PostgreSQL store.
What a turn's rows are is decided above this layer (acp_bridge.cli.sessions.facts)."""
