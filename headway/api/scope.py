"""The names of what Headway adds to an ASGI scope: the extension `headway serve`'s
server puts in each request's scope (`headway.api.server`), read by the live stream
(`api.events`)."""

# What lets a stream close a connection whose reader stalled, and end itself when the
# server shuts down.
CONNECTION = "headway.connection"
