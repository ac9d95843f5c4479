"""Every program the tests, their helpers, bench/ and scripts/ run comes from a Debian
package the test command installs (scripts/system-packages, with what those depend on),
or from one every Debian 12 has (Essential, or of priority required), or from Python 3
itself: so that a program added to a test without its install step fails here, on the
developer's machine, not first on a newcomer's.

The programs run directly are found by reading the sources (tests/programs.py); those run
on their behalf (by podman, Playwright, npm) are named in INDIRECT below."""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .programs import CLIENT_PAGE, ROOT, Found, Use, scan

if shutil.which("dpkg-query") is None:
    pytest.skip("needs Debian's dpkg", allow_module_level=True)

SYSTEM_PACKAGES = ROOT / "scripts" / "system-packages"

# What the programs found run in their turn, which no source of ours names.
INDIRECT: dict[str, list[tuple[str, str]]] = {
    "podman": [
        ("conmon", "each container's monitor"),
        ("runc", 'the runtime scripts/image sets (containers.conf: runtime = "runc")'),
        ("/usr/lib/podman/netavark", 'the network backend (network_backend = "netavark")'),
        ("/usr/lib/podman/aardvark-dns", "netavark's names between containers"),
        ("iptables", "netavark's firewall rules, for every container with a network"),
    ],
    "podman-compose": [("podman", "each of its steps")],
    "chromium": [
        (
            "/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf",
            "the page tests' emoji (tests/test_pages.py)",
        )
    ],
    "npm": [("node", "npm itself and the MCP Inspector it installs (tests/test_mcp.py)")],
    "npx": [("node", "the MCP Inspector (tests/test_mcp.py)")],
    "mmdebstrap": [("apt-get", "its downloads"), ("dpkg", "its installs")],
}

# Commands whose first word the scan cannot tell, by file and expression, and what they
# run. CLIENT_PAGE means the sh blocks of "Report from your code", docs/client.md (which
# the scan reads, as that file).
UNRESOLVED: dict[tuple[str, str], list[str]] = {
    ("tests/test_cli_client.py", "bash -c example"): [CLIENT_PAGE],
    ("tests/test_cli_run.py", "bash -c example"): [CLIENT_PAGE],
    ("tests/test_client.py", "bash -c setup + 'echo \"$HEADWAY_SPACE\"'"): [CLIENT_PAGE],
    ("tests/test_client_wheel.py", "{line}"): [CLIENT_PAGE],  # its pip install "$(curl …)"
    ("tests/test_watch.py", "bash -c command"): [CLIENT_PAGE],  # its `headway watch` lines
    # `headway run` of recorder_args: this Python and a script.
    ("tests/test_cli_run.py", "{line}"): ["python3"],
    # The space page's snippets (headway/web/static/owner.js), run as pasted.
    ("tests/test_pages.py", "{snippet['curl']}"): ["curl", "cut"],
    ("tests/test_pages.py", "{snippet['url']}"): ["curl"],
}

# Programs looked for that nothing needs: each has a fallback, or is a precondition.
OPTIONAL = {
    "valkey-server": "tests/servers.py and scripts/system-packages take Redis's fork when there",
    "py-spy": "bench/profile.py profiles with it when installed, and says so when not",
    "sudo": "only without root, which then has to have it to install anything (Quickstart)",
    "pip": "docs/client.md's `pip install`, which the tests run with a virtualenv's pip",
}

SEARCHED = [
    "/usr/sbin",
    "/sbin",
    "/usr/lib/podman",
    *sorted(glob.glob("/usr/lib/postgresql/*/bin")),
]


def system_packages() -> dict[str, list[str]]:
    """scripts/system-packages' packages, each with what shows it is installed."""
    listed = subprocess.run(
        [str(SYSTEM_PACKAGES), "--list"], capture_output=True, text=True, check=True
    ).stdout
    return {line.split()[0]: line.split()[1:] for line in listed.splitlines() if line.strip()}


def virtualenv_program(name: str) -> bool:
    """A program of this checkout's virtualenv (pip installs it, not apt)."""
    return any(
        (Path(directory) / name).exists()
        for directory in {ROOT / ".venv" / "bin", Path(sys.executable).parent}
    )


def locate(program: str) -> str | None:
    """The file a program name or path stands for here."""
    if program.startswith("/"):
        return program if os.path.exists(program) else None
    path = os.pathsep.join([os.environ.get("PATH", ""), *SEARCHED])
    return shutil.which(program, path=path)


def owners(paths: list[str]) -> dict[str, str]:
    """The package that holds each file, as `dpkg -S` says: of the path as given, else of
    the file it resolves to (alternatives, symlinks), else of its /usr-merged twin."""
    tried: dict[str, list[str]] = {}
    for path in paths:
        real = os.path.realpath(path)
        twins = [
            p.removeprefix("/usr") if p.startswith("/usr/") else "/usr" + p for p in (path, real)
        ]
        tried[path] = list(dict.fromkeys([path, real, *twins]))
    every = sorted({candidate for candidates in tried.values() for candidate in candidates})
    held: dict[str, str] = {}
    done = subprocess.run(["dpkg", "-S", *every], capture_output=True, text=True)
    for line in done.stdout.splitlines():
        packages, _, file = line.partition(": ")
        if file and "diversion" not in packages:
            held[file] = packages.split(",")[0].split(":")[0].strip()
    return {
        path: next((held[c] for c in candidates if c in held), "")
        for path, candidates in tried.items()
    }


@functools.cache
def closure(packages: frozenset[str]) -> frozenset[str]:
    """The packages and every one they depend on without alternative (what apt-get
    install brings with them, recommends aside)."""
    shown = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
         "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *sorted(packages)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    depends: dict[str, set[str]] = {}
    current = ""
    alternative = False
    for line in shown.splitlines():
        if not line.startswith(" "):
            current = line.strip()
            depends.setdefault(current, set())
            continue
        kind, _, name = line.strip().partition(": ")
        if kind.startswith("|"):
            alternative = True
            continue
        if alternative:  # the last of an or-group
            alternative = False
            continue
        if kind in ("Depends", "PreDepends") and not name.startswith("<"):
            depends[current].add(name.split(":")[0])
    out, todo = set(), list(packages)
    while todo:
        package = todo.pop()
        if package not in out:
            out.add(package)
            todo += depends.get(package, ())
    return frozenset(out)


def given(packages: list[str]) -> set[str]:
    """Those every Debian 12 has: Essential, or of priority required."""
    shown = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${Essential}\t${Priority}\n", *packages],
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    return {
        fields[0]
        for fields in (line.split("\t") for line in shown.splitlines())
        if len(fields) == 3 and (fields[1] == "yes" or fields[2] == "required")
    }


def provided_by(holders: set[str], package: str) -> set[str]:
    """Those of `holders` that provide `package`."""
    shown = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${Provides}\n", *sorted(holders - {""})],
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    out = set()
    for line in shown.splitlines():
        name, _, provides = line.partition("\t")
        if package in {p.split()[0] for p in provides.split(",") if p.strip()}:
            out.add(name)
    return out


@functools.cache
def found() -> Found:
    return scan()


def uses() -> list[Use]:
    """Every program found, with the indirect ones and those of UNRESOLVED's commands."""
    every = list(found().uses)
    for unresolved in found().unresolved:
        for program in UNRESOLVED.get((unresolved.file, unresolved.text), []):
            if program != CLIENT_PAGE:
                every.append(Use(program, f"{unresolved.file}:{unresolved.line}"))
    names = {use.program for use in every}
    for runner, indirect in INDIRECT.items():
        if runner in names:
            every += [Use(program, f"{runner}, for {why}") for program, why in indirect]
    return every


def test_the_scan_tells_every_command_it_finds() -> None:
    """A command whose first word the scan cannot tell is named in UNRESOLVED, with what
    it runs: write it as a literal, or add it there."""
    unknown = sorted(
        {
            f"{u.file}:{u.line}: {u.text}"
            for u in found().unresolved
            if (u.file, u.text) not in UNRESOLVED
        }
    )
    assert not unknown, "cannot tell what these run (see UNRESOLVED):\n" + "\n".join(unknown)
    stale = set(UNRESOLVED) - {(u.file, u.text) for u in found().unresolved}
    assert not stale, f"UNRESOLVED names commands no longer there: {sorted(stale)}"


def test_the_scan_finds_the_programs_known_to_be_run() -> None:
    """The scan itself: programs run in each way it reads."""
    names = {use.program for use in found().uses}
    expected = {
        "podman",  # run("podman", ...) through test_image's podman() and run()
        "podman-compose",  # in a function nested in a fixture
        "ip",  # test_image's run("ip", ...)
        "initdb",  # _pg_tool("initdb"): a function returning its argument's which()
        "runuser",  # [*_as_postgres(), *command] through PostgresServer._run
        "redis-server",  # self.binary
        "/usr/sbin/pgbouncer",  # shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        "runc",  # shutil.which(tool) for tool in TOOLS
        "chromium",  # shutil.which("chromium")
        "wrk",  # wrk_binary() in bench/
        "git",  # subprocess.run(["git", ...]) and scripts/test's git ls-files
        "npx",  # inspector_command()'s which()
        "mmdebstrap",  # scripts/image, past `nice -n 19`
        "apt-get",  # scripts/system-packages, past `$SUDO`
        "npm",  # scripts/test's `command -v npm`
        "chrt",  # scripts/test
        "curl",  # docs/client.md's sh blocks the tests run
        "grep",  # a `bash -c` script of tests/test_cli_run.py
    }
    assert expected <= names, f"the scan missed {sorted(expected - names)}"
    assert not names & {
        "build",
        "stand_ins",
        "compose",
        "run",
        "finish",
        "present",
        "inside",
        "i",
    }, "shell functions or arithmetic taken for programs"


def test_every_program_run_comes_from_a_package_the_test_command_installs() -> None:
    listed = system_packages()
    installs = closure(frozenset(listed) | {"python3"})
    problems, located, table = [], {}, {}
    for use in uses():
        if virtualenv_program(use.program) and not use.program.startswith("/"):
            continue
        path = locate(use.program)
        if path is None:
            if use.program not in OPTIONAL:
                problems.append(
                    f"{use.program} (run by {use.where}) is not installed here: run "
                    "scripts/system-packages, or install it and add its package there"
                )
            continue
        located.setdefault(path, []).append(use)
    held = owners(sorted(located))
    essential = given(sorted(set(held.values()) - {""}))
    for path, by in sorted(located.items()):
        package = held[path]
        table[by[0].program] = package or "?"
        if by[0].program in OPTIONAL:
            continue
        where = ", ".join(sorted({use.where for use in by})[:3])
        if not package:
            problems.append(f"{path} (run by {where}) is in no Debian package: dpkg -S knows none")
        elif package not in installs and package not in essential:
            problems.append(
                f"{by[0].program} ({path}, run by {where}) comes from the Debian package "
                f"{package}, which scripts/system-packages does not install: add it there"
            )
    print("\n".join(f"{program:32} {package}" for program, package in sorted(table.items())))
    assert not problems, "\n".join(problems)


def test_what_system_packages_looks_for_belongs_to_its_package() -> None:
    """Each entry's probe is a file of that package, so that `apt-get purge` of it makes
    the next `scripts/system-packages` install it again."""
    probed: dict[str, list[str]] = {}
    for package, probes in system_packages().items():
        for probe in probes:
            paths = glob.glob(probe) if "*" in probe else [locate(probe)]
            probed[package] = probed.get(package, []) + [p for p in paths if p]
    held = owners(sorted({path for paths in probed.values() for path in paths}))
    wrong = []
    for package, paths in probed.items():
        holders = {held[path] for path in paths}
        # The package itself, one it depends on (postgresql: postgresql-15), or one that
        # provides it (NodeSource's nodejs provides npm).
        if not paths or package in holders:
            continue  # not installed here: the test above says so if it is needed
        if not holders & (closure(frozenset([package])) | provided_by(holders, package)):
            wrong.append(f"{package}: {', '.join(paths)} belong to {', '.join(sorted(holders))}")
    assert not wrong, "scripts/system-packages looks for files of other packages:\n" + "\n".join(
        wrong
    )
