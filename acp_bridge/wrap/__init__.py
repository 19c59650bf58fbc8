"""`acp-bridge wrap`: durable transcripts for any ACP agent (docs/wrap.md)."""
