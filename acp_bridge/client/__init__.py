"""The client side of ACP, shared by `acp-bridge chat`, the snapshot harness's driver and
`acp-bridge demo`: the connection to an agent child (connection.py, over the one
`rpc.Connection`) and the `fs/*` and `terminal/*` a client serves it (methods.py).

It sits above `rpc` and `tools`; `cli` and `snapshot` import it, it imports neither.
"""
