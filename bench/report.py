"""Results of a run: scenario rows, the issue's targets, the machine, and the files written."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from .load import LoadResult, wrk_version
from .processes import ROOT

MB = 1024 * 1024


@dataclass
class Row:
    """One scenario: measured (`ok`), measured with failed requests (`error`), or not run
    (`skipped`, with the reason)."""

    name: str
    title: str
    status: str = "ok"
    reason: str = ""
    requests_per_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    ratio_to_baseline: float | None = None
    cpu_us_per_request: float | None = None
    requests: int | None = None
    connections: int | None = None
    duration_s: float | None = None
    errors: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def measured(cls, name: str, title: str, result: LoadResult, cpu_s: float | None = None) -> Row:
        row = cls(
            name,
            title,
            requests_per_s=round(result.requests_per_s, 1),
            p50_ms=round(result.latency_us["p50"] / 1000, 3),
            p99_ms=round(result.latency_us["p99"] / 1000, 3),
            requests=result.requests,
            connections=result.connections,
            duration_s=round(result.duration_s, 2),
            errors={k: v for k, v in result.errors.items() if v},
        )
        # wrk corrects its percentiles for coordinated omission: one pause of the server
        # adds synthetic samples, so p99 can jump while p90 stays; the max shows the pause.
        for key in ("p90", "max"):
            if key in result.latency_us:
                row.extra[f"{key}_ms"] = round(result.latency_us[key] / 1000, 3)
        if cpu_s is not None and result.requests:
            row.cpu_us_per_request = round(cpu_s * 1e6 / result.requests, 1)
        if result.error_count:
            row.status = "error"
            row.reason = "failed requests: " + ", ".join(f"{k} {v}" for k, v in row.errors.items())
        return row


@dataclass
class Target:
    name: str
    description: str
    status: str  # pass, fail or skipped
    measured: str
    note: str = ""
    group: str = ""  # which issue's targets; the table shows each group under its name


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
    except OSError:
        pass
    versions = {}
    for package in ("uvicorn", "starlette", "uvloop", "httptools", "sqlalchemy", "msgspec"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "nproc": os.cpu_count(),
        "memory_mb": round(memory / MB) if memory else None,
        "cpu_model": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "versions": versions,
        "wrk": wrk_version(),
        "git": git_state(),
    }


def git_state(checkout: Path = ROOT) -> dict[str, Any]:
    """The checkout's commit, and whether its work tree differs from it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=checkout, capture_output=True, text=True, timeout=10
        ).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--short"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def _rate(value: float | None) -> str:
    """Requests per second: whole numbers, but a decimal for the slow whole-space reads."""
    return _num(value, 0 if value is None or value >= 100 else 1)


def table(rows: list[Row]) -> str:
    """The scenario table as Markdown (it reads fine as plain text too)."""
    lines = [
        "| scenario | req/s | p50 ms | p99 ms | × baseline | CPU µs/req | notes |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        note = row.reason if row.status != "ok" else row.extra.get("note", "")
        if row.status == "skipped":
            note = f"skipped: {row.reason}"
        lines.append(
            f"| {row.title} | {_rate(row.requests_per_s)} | {_num(row.p50_ms, 2)} | "
            f"{_num(row.p99_ms, 2)} | {_num(row.ratio_to_baseline, 3)} | "
            f"{_num(row.cpu_us_per_request)} | {note} |"
        )
    return "\n".join(lines)


def targets_table(targets: list[Target]) -> str:
    lines = ["| target | result | measured | note |", "|---|---|---|---|"]
    for t in targets:
        mark = {"pass": "PASS", "fail": "FAIL"}.get(t.status, "skipped")
        lines.append(f"| {t.description} | {mark} | {t.measured} | {t.note} |")
    return "\n".join(lines)


def grouped_targets(targets: list[Target]) -> list[tuple[str, list[Target]]]:
    """Targets by group, in the order the groups first appear."""
    groups: dict[str, list[Target]] = {}
    for t in targets:
        groups.setdefault(t.group, []).append(t)
    return list(groups.items())


def targets_sections(targets: list[Target], level: str = "###") -> list[str]:
    lines: list[str] = []
    for group, members in grouped_targets(targets):
        if group:
            lines += [f"{level} Targets: {group}", ""]
        lines += [targets_table(members), ""]
    return lines


def short_commit(git: dict[str, Any]) -> str:
    """A `git_state` as its commit's first 12 digits, marked if the work tree differs."""
    return (git["commit"] or "unknown")[:12] + (" (uncommitted changes)" if git["dirty"] else "")


def markdown(run: dict[str, Any], rows: list[Row], targets: list[Target]) -> str:
    m = run["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    commit = short_commit(m["git"])
    options = run["options"]
    return "\n".join(
        [
            f"# Headway benchmark: {run['started_at']}",
            "",
            f"Mode `{options['mode']}`: wrk {options['duration']} s per run, "
            f"{options['connections']} connections, {options['threads']} threads; "
            f"big space {options['big']:,} tasks, parent with {options['children']:,} children"
            + (
                f"; flood {options['flood_seconds']:g} s per phase, "
                f"{options['flood_concurrency']} requests at once."
                if "flood_seconds" in options
                else "."
            ),
            "",
            table(rows),
            "",
            "## Targets",
            "",
            *targets_sections(targets),
            "## Machine",
            "",
            f"- {m['nproc']} CPUs, {m['memory_mb']} MB, {m['cpu_model']}, Linux {m['kernel']}",
            f"- Python {m['python']}; {versions}; {m['wrk']}",
            f"- git {commit}",
            f"- whole run took {run['elapsed_s']:.0f} s; load average (1, 5, 15 min) "
            f"{_loads(run['load_average']['at_start'])} at start, "
            f"{_loads(run['load_average']['at_end'])} at end",
            "",
        ]
    )


def _loads(values: list[float]) -> str:
    return "/".join(f"{v:.1f}" for v in values)


def write(directory: Path, run: dict[str, Any], rows: list[Row], targets: list[Target]) -> None:
    """Write `latest.json` and `latest.md` into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    document = {
        **run,
        "scenarios": [asdict(r) for r in rows],
        "targets": [asdict(t) for t in targets],
    }
    (directory / "latest.json").write_text(json.dumps(document, indent=2) + "\n")
    (directory / "latest.md").write_text(markdown(run, rows, targets))
