"""`acp-bridge import`: other agents' own transcripts into the store (docs/import.md).
`native` the pure core (a reader's records into our events), one pure reader module per
format, `formats` which reader reads a file, `store` the writing, `main` the command."""
