"""`acp-bridge sessions`: stored sessions for people at a terminal."""
