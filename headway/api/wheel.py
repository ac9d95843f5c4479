"""A wheel of this very `headway` package, built in memory from its installed files: what
`GET /client` serves, so that a machine that only reports installs the client and the
`headway` command of the server's own version without the package being published.

What the wheel holds, and why:
- every Python module of the package, the server's too: the client and the command
  import shared modules (`headway.domain.failure`, `headway.config`), and a hand-picked list
  would break the client the day an import moves. The server's modules are inert
  without the server's dependencies, and the command says how to get them;
- none of the files only the server reads (the pages' templates and static files, the
  migration template): no client needs them, and a client install cannot serve pages;
- metadata that requires the client's dependencies only (`[project] dependencies`:
  httpx, rich) and offers the `tqdm` extra, read from this installation's own metadata,
  never the server's extra.

The same files give the same bytes (sorted entries, fixed timestamps and modes).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

from .. import __version__

DISTRIBUTION = "headway"
PACKAGE_DIR = Path(__file__).resolve().parent.parent
# Extras a client may ask for; every other extra (`server`, `test`, `bench`) is left out.
CLIENT_EXTRAS = ("tqdm",)
# The earliest time a zip entry can hold: the same for every build.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Wheel:
    """A built wheel: its file name and its bytes."""

    name: str
    body: bytes


def file_name(version: str = __version__) -> str:
    """The wheel's file name for `version`: pure Python, any platform."""
    return f"{DISTRIBUTION}-{version}-py3-none-any.whl"


def build(version: str = __version__, package_dir: Path = PACKAGE_DIR) -> Wheel:
    """The wheel of the package in `package_dir` as `version`. Raises
    importlib.metadata.PackageNotFoundError when `headway` runs without being installed
    (then there is no metadata to say what the client requires)."""
    dist_info = f"{DISTRIBUTION}-{version}.dist-info"
    installed = importlib.metadata.distribution(DISTRIBUTION)
    files = {
        f"{package_dir.name}/{path.relative_to(package_dir).as_posix()}": path.read_bytes()
        for path in sorted(package_dir.rglob("*.py"))
        if "__pycache__" not in path.parts
    }
    files[f"{dist_info}/METADATA"] = _metadata(version, installed.metadata).encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: headway\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{dist_info}/entry_points.txt"] = _entry_points(installed.entry_points).encode()
    record = "".join(f"{path},sha256={_digest(body)},{len(body)}\n" for path, body in files.items())
    files[f"{dist_info}/RECORD"] = f"{record}{dist_info}/RECORD,,\n".encode()
    return Wheel(file_name(version), _zip(files))


def _metadata(version: str, installed: importlib.metadata.PackageMetadata) -> str:
    """METADATA: the installed one's name, summary and Python, and only what a client
    requires: the requirements without an extra, and those of CLIENT_EXTRAS."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {DISTRIBUTION}",
        f"Version: {version}",
        f"Summary: {installed['Summary']}",
        f"Requires-Python: {installed['Requires-Python']}",
    ]
    extras = {extra: f'extra == "{extra}"' for extra in CLIENT_EXTRAS}
    lines += [f"Provides-Extra: {extra}" for extra in extras]
    for requirement in installed.get_all("Requires-Dist") or []:
        marker = requirement.partition(";")[2].strip()
        if not marker or marker in extras.values():
            lines.append(f"Requires-Dist: {requirement}")
    return "\n".join(lines) + "\n"


def _entry_points(entry_points: Iterable[importlib.metadata.EntryPoint]) -> str:
    """entry_points.txt: the installed console scripts (the `headway` command)."""
    scripts = sorted(
        f"{point.name} = {point.value}"
        for point in entry_points
        if point.group == "console_scripts"
    )
    return "[console_scripts]\n" + "".join(f"{line}\n" for line in scripts)


def _digest(body: bytes) -> str:
    """A RECORD hash: unpadded URL-safe base64 of the SHA-256."""
    return base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()


def _zip(files: dict[str, bytes]) -> bytes:
    """The zip of `files` in their order, each entry dated ZIP_EPOCH, mode 0644."""
    buffer = BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, body in files.items():
            entry = zipfile.ZipInfo(path, ZIP_EPOCH)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, body)
    return buffer.getvalue()
