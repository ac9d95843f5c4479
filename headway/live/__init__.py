"""Live streams: one renderer per watched space (`live.streams`) and the events of a
round encoded once (`live.events`)."""
