"""Headway's benchmark harness: a real server and a bare-ASGI baseline, driven by wrk.

Run it with `python -m bench.run`; see bench/README.md.
"""
