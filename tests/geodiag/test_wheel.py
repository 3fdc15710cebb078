"""The built wheel, installed outside the source tree, is what users run: every runtime file
ships in it (the report template once did not: `geodiag report` failed with TemplateNotFound
in every wheel install), the light install gates without the plotting stack or torch, and
`geodiag report` and `gti` name the extra they need instead of a traceback.

The wheel is built from a copy of the tree (no build/ or egg-info left in the checkout, no
stale build/ files in the wheel) and installed, not editable, into a fresh venv with pip's
own index settings and cache: `make test` needs PyPI already. About 27 s on 2 cores.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint

from geodiag.outputs.report.write import REPORT_INSTALL, REPORT_MODULES
from gti.cli import GTI_INSTALL, GTI_MODULES

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("geodiag", "gti")
# Not part of a build: VCS, environments, outputs, caches (the committed reports are 17 MB).
NOT_SOURCE = (
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "runs",
    "reports",
    ".cache",
    ".whl",
    ".pytest_cache",
    ".ruff_cache",
)
PIP = ["-m", "pip", "--disable-pip-version-check"]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _names(requirements: list[str]) -> set[str]:
    return {re.match(r"[A-Za-z0-9_.\-]+(\[[^\]]*\])?", r).group(0).lower() for r in requirements}


def _runtime_files() -> list[str]:
    """Every file under the import packages that is not Python source, as a wheel path."""
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*")):
            if (
                path.is_file()
                and path.suffix not in (".py", ".pyc")
                and "__pycache__" not in path.parts
            ):
                out.append(path.relative_to(ROOT).as_posix())
    return out


def _clean_env() -> dict[str, str]:
    """The caller's environment minus whatever would put the source tree on the path."""
    drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(cmd: list, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def build_wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the tree (conftest.py's session fixture ``wheel``:
    test_wheel.py and io/test_wheel_remote.py install the one build)."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    # --no-build-isolation: the test extra pins setuptools>=77 (build-system.requires), so
    # no isolated build environment is downloaded for each run.
    res = _run(
        [
            sys.executable,
            *PIP,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            work / "dist",
            src,
        ],
        cwd=work,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (built,) = (work / "dist").glob("geodiag-*.whl")
    return built


def test_wheel_ships_every_runtime_file_and_the_license(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    runtime = _runtime_files()
    assert (
        "geodiag/outputs/report/templates/report.html.j2" in runtime
    )  # the scan sees the template
    assert [f for f in runtime if f not in names] == []
    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    assert f"{dist_info}/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata
    entry_points = zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
    for script in _pyproject()["project"]["scripts"]:
        assert f"{script} =" in entry_points


def test_license_is_the_apache_2_text():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert _pyproject()["project"]["license"] == "Apache-2.0"


def test_extras_match_what_the_commands_check():
    """The modules `geodiag report` and `gti` look for are the ones their extras install;
    the gate's own dependencies include none of them; `make test` installs the report."""
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    assert _names(extras["report"]) == set(REPORT_MODULES.values())
    assert "geodiag[report]" in _names(extras["gti"]) and "geodiag[report]" in _names(
        extras["test"]
    )
    assert set(GTI_MODULES) <= _names(extras["gti"])
    core = _names(project["dependencies"])
    assert core.isdisjoint({*REPORT_MODULES.values(), *GTI_MODULES, "seaborn", "pandas"})
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "-e '.[gti,test]'" in makefile
    # torch is pinned in the install line gti prints exactly as the Makefile installs it
    (pin,) = re.findall(r"pip install -q (torch==\S+)", makefile)
    assert pin in GTI_INSTALL.split()


def test_wheel_install_outside_the_tree_gates_light_and_reports_with_the_extra(wheel, tmp_path):
    """One venv, in order: the light install (check, metrics; report and gti refuse in one
    line), then the report extra on top (report writes the page)."""
    venv = tmp_path / "venv"
    res = _run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    bin_dir = venv / "bin"
    py, geodiag, gti = bin_dir / "python", bin_dir / "geodiag", bin_dir / "gti"

    res = _run([py, *PIP, "install", "-q", wheel], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    res = _run([py, "-c", "import geodiag; print(geodiag.__file__)"], cwd=tmp_path)
    assert Path(res.stdout.strip()).is_relative_to(venv), res.stdout  # not the source tree
    probe = "import importlib.util as u, sys; print([m for m in sys.argv[1:] if u.find_spec(m)])"
    heavy = [*REPORT_MODULES, "seaborn", "pandas", *GTI_MODULES]
    res = _run([py, "-c", probe, *heavy], cwd=tmp_path)
    assert res.stdout.strip() == "[]", res.stdout  # the light install is light

    rows = base_rows()
    random = write_checkpoint(tmp_path / "random", planted_new_rows("random", rows))
    mean = write_checkpoint(tmp_path / "mean", planted_new_rows("mean", rows))
    res = _run([geodiag, "check", random, "--permutations", "10"], cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    res = _run([geodiag, "check", mean, "--permutations", "10"], cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr  # the gate fails a collapsed init
    res = _run([geodiag, "metrics", random, "--json", "--permutations", "10"], cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.lstrip().startswith("{"), res.stderr

    html = tmp_path / "out" / "report.html"
    res = _run([geodiag, "report", random, mean, "-o", html, "--permutations", "10"], cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().splitlines() == [
        "error: geodiag report: needs the plotting extra (no module matplotlib, PIL, jinja2): "
        + REPORT_INSTALL
    ]
    assert not html.exists()
    for args in (["--help"], ["init", "--help"]):  # help needs no torch: it says what to install
        res = _run([gti, *args], cwd=tmp_path)
        assert res.returncode == 0 and "Usage: gti" in res.stdout, res.stdout + res.stderr
        if args == ["--help"]:
            assert "experiment" in res.stdout and GTI_INSTALL in " ".join(res.stdout.split())
    for args in (["init"], ["sids", "build", "--data", "movielens-100k"]):
        res = _run([gti, *args], cwd=tmp_path)
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stderr.strip().splitlines() == [
            f"error: gti: needs torch and transformers (no module torch, transformers): {GTI_INSTALL}"
        ]

    res = _run([py, "-c", "import geodiag.callback"], cwd=tmp_path)
    assert res.returncode == 1 and res.stderr.strip().splitlines()[-1] == (
        "ImportError: geodiag.callback needs transformers (the Trainer it hooks into): "
        "pip install transformers (and torch; see docs/training.md)"
    )
    res = _run([py, "-c", "import tools"], cwd=tmp_path)
    assert res.returncode == 1, "the repository's dev tools must not ship in the wheel"

    res = _run([py, *PIP, "install", "-q", f"{wheel}[report]"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    res = _run([geodiag, "report", random, mean, "-o", html, "--permutations", "10"], cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    page = html.read_text(encoding="utf-8")
    assert page.lstrip().lower().startswith("<!doctype html>") and "data:image/png;base64," in page
    assert html.with_suffix(".json").is_file()


@pytest.fixture(scope="module")
def sdist(wheel) -> Path:
    """The sdist, built by setuptools' own backend from the wheel's copy of the tree (no
    isolated build environment, as for the wheel)."""
    src, dist = wheel.parent.parent / "src", wheel.parent
    code = f"from setuptools import build_meta; build_meta.build_sdist({str(dist)!r})"
    res = _run([sys.executable, "-c", code], cwd=src)
    assert res.returncode == 0, res.stderr[-3000:]
    (built,) = dist.glob("geodiag-*.tar.gz")
    return built


def test_distributions_pass_twine_check_strict(wheel, sdist):
    """What PyPI would render: the long description (docs/pypi.md) and the metadata."""
    pytest.importorskip("twine")
    res = _run([sys.executable, "-m", "twine", "check", "--strict", wheel, sdist], cwd=ROOT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert res.stdout.count("PASSED") == 2, res.stdout
    metadata = zipfile.ZipFile(wheel).read(
        next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("METADATA"))
    )
    assert b"Description-Content-Type: text/markdown" in metadata
    assert b"Classifier: License" not in metadata  # the SPDX expression says it, once
