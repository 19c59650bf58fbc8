"""`acp-bridge chat`: a terminal ACP client."""
