"""The names of what Headway adds to an ASGI scope, shared by the server that adds one
(`headway.server`), the app (`headway.app`), the live stream (`api.events`) and `/mcp`."""

# The extension `headway serve`'s server puts in each request's scope: what lets a
# stream close a connection whose reader stalled, and end itself when the server shuts
# down.
CONNECTION = "headway.connection"
# The server's `send` as it reached the app: a stream's events skip the wrappers that
# only look at an answer's start and its end.
RAW_SEND = "headway.raw_send"
# The client address of an `/mcp` request, as rates and shares count it, for its tools.
CLIENT = "headway.client"
