"""The report in a real browser: headless chromium renders it, the screenshot is not blank,
and the page requests nothing from the network. Skipped where chromium is not installed
(`.ci/run` installs Debian's `chromium`)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import write_set

from geodiag.report import ReportOptions, write_report

CHROMIUM = next(
    (
        p
        for p in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium")
        if p and Path(p).exists()
    ),
    None,
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (apt-get install chromium)"
)

CONTROL = """<!DOCTYPE html><html><body><p>control page</p>
<img src="http://example.invalid/a.png"><img src="https://example.invalid/b.png"></body></html>"""


def render(page: Path, tmp: Path) -> tuple[np.ndarray, list[str]]:
    """Screenshot (H, W, C) of ``page`` and the URLs of the network requests the page started."""
    shot, netlog, profile = (
        tmp / f"{page.stem}.png",
        tmp / f"{page.stem}.netlog.json",
        tmp / f"{page.stem}-profile",
    )
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # nothing could leave the machine anyway
        f"--log-net-log={netlog}",
        "--hide-scrollbars",
        f"--screenshot={shot}",
        "--window-size=1280,2000",
        page.as_uri(),
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    import matplotlib.image

    return matplotlib.image.imread(shot), page_requests(netlog)


def page_requests(netlog: Path) -> list[str]:
    """URLs of URL requests whose top-level site is a file:// page, i.e. started by the page.

    The browser's own background traffic (component updater, sign-in) carries another
    network isolation key and is left out.
    """
    text = netlog.read_text(encoding="utf-8", errors="replace").rstrip()
    try:
        log = json.loads(text)
    except json.JSONDecodeError:  # cut short at exit: close the event list ourselves
        log = json.loads(text.rstrip(",") + "]}")
    types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    urls = []
    for event in log["events"]:
        params = event.get("params") or {}
        if types.get(event["type"]) == "URL_REQUEST_START_JOB" and "file://" in params.get(
            "network_isolation_key", ""
        ):
            urls.append(params.get("url", ""))
    return urls


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    paths = write_set(tmp / "ckpts")
    files = write_report(paths, tmp / "report.html", opts=ReportOptions(n_permutations=20))
    control = tmp / "control.html"
    control.write_text(CONTROL)
    return render(files.html, tmp), render(control, tmp)


def test_detector_sees_requests_of_a_page_that_makes_them(rendered):
    _, (_, control_requests) = rendered
    assert any(u.startswith("http://example.invalid/") for u in control_requests), control_requests


def test_report_requests_nothing(rendered):
    (_, requests), _ = rendered
    assert [u for u in requests if not u.startswith(("file:", "data:"))] == []


def test_screenshot_is_not_blank(rendered):
    (image, _), _ = rendered
    rgb = image[..., :3]
    assert rgb.shape[0] >= 1000 and rgb.shape[1] >= 1200
    assert rgb.std() > 0.05  # text, tables and figures, not a flat page
    not_white = (rgb < 0.9).any(axis=-1).mean()
    assert not_white > 0.03
    colored = (rgb.max(axis=-1) - rgb.min(axis=-1) > 0.3).mean()  # badges and figures are in colour
    assert colored > 0.002
