"""`scripts/bootstrap`, which `scripts/serve` and `scripts/test` run first: what it says
while it sets `.venv` up, and that pip's own noise is kept out of sight unless pip fails.
Run in a copy of the scripts whose `.venv/bin/python` is a stand-in that records what pip
was asked and talks as noisily as pip and setuptools do (nothing is installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOISE = "BuildBackendWarning: Editable installation"
STAND_IN = f"""#!/bin/sh
echo "$@" >> "$(dirname "$0")/asked"
echo "Collecting httpx"
echo "{NOISE}" >&2
exit "${{PIP_EXIT:-0}}"
"""


def copy(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "bootstrap", tmp_path / "scripts" / "bootstrap")
    for name in ("pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STAND_IN)
    python.chmod(0o755)
    return tmp_path


def bootstrap(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["scripts/bootstrap", "server"],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_first_setup_says_what_it_does_once_and_keeps_pips_noise_quiet(tmp_path):
    root = copy(tmp_path)
    first = bootstrap(root)
    assert first.returncode == 0, first.stderr
    assert first.stderr.splitlines()[0] == (
        "bootstrap: setting up .venv (about 30 s, first run only)"
    )
    assert NOISE not in first.stderr + first.stdout
    assert "Collecting" not in first.stderr + first.stdout
    assert "-e .[server]" in (root / ".venv" / "bin" / "asked").read_text()
    again = bootstrap(root)  # nothing changed: nothing said, nothing installed
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")


def test_a_failed_install_shows_pips_own_words(tmp_path):
    failed = bootstrap(copy(tmp_path), PIP_EXIT="1")
    assert failed.returncode != 0
    assert NOISE in failed.stderr and "Collecting httpx" in failed.stderr
    assert failed.stderr.rstrip().endswith("bootstrap: pip failed; its output is above.")
