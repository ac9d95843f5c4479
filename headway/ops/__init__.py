"""Operations: what is counted for Prometheus (`ops.metrics`, `ops.gauges`), the logs,
the disk budget, which failures mean a dependency is down, the Redis link, and the answer
of GET /up (`ops.health`)."""
