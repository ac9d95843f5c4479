"""The scenarios of `python -m bench.run`, a module per family, each phase a function of
the run's `Harness`."""

# The embedded, streams and scale-out servers run without rate limits: their scenarios
# create thousands of tasks a second from one address, which the default rates rightly
# refuse (the contract keeps HEADWAY_RATE_LIMITS=false for benchmarks).
NO_RATE_LIMITS = {"HEADWAY_RATE_LIMITS": "false"}
