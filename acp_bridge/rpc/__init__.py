"""The JSON-RPC 2.0 peer over stdio: transport, connection, dispatch and the pure protocol helpers."""
