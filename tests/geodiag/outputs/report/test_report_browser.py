"""The report in a real browser: headless chromium renders it, the screenshot is not blank,
the page requests nothing from the network, and a two-arm report lays out at a desktop's
and a phone's width with nothing past its card or the page, and its figures' tick labels
drawn as math, not as raw mathtext. Skipped where chromium is not installed (`.ci/run`
installs Debian's `chromium`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from devtools import Browser
from geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint
from report_fixtures import write_set

from geodiag.outputs.report import ReportOptions, write_report

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


# Evaluated in the page: the boxes of every element and text run, and the text of each
# SVG figure.
MEASURE = """(() => {
  const vw = document.documentElement.clientWidth;
  const out = {width: vw, scroll_width: document.documentElement.scrollWidth,
               page: [], cards: [], card_widths: [], main_width: 0, svg_text: []};
  const scrolled = n => { for (let p = n.parentElement; p; p = p.parentElement)
    if (p.classList.contains("scroll") || ["auto", "scroll"].includes(getComputedStyle(p).overflowX))
      return true; return false; };
  const boxes = root => {  // [node, rect] of elements and non-blank text runs under root
    const found = [];
    const walk = document.createTreeWalker(root, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      let r;
      if (n.nodeType === 3) {
        if (!n.textContent.trim()) continue;
        const range = document.createRange(); range.selectNodeContents(n);
        r = range.getBoundingClientRect();
      } else r = n.getBoundingClientRect();
      if (r.width > 0) found.push([n, r]);
    }
    return found;
  };
  const say = (n, r) => ((n.nodeType === 3 ? n.parentElement : n).tagName + " '" +
    n.textContent.trim().slice(0, 50) + "' " + Math.round(r.left) + ".." + Math.round(r.right));
  for (const [n, r] of boxes(document.body))
    if (!scrolled(n.nodeType === 3 ? n.parentElement : n) && (r.right > vw + 1 || r.left < -1))
      out.page.push(say(n, r));
  const main = document.querySelector("main"), pad = getComputedStyle(main);
  out.main_width = main.clientWidth - parseFloat(pad.paddingLeft) - parseFloat(pad.paddingRight);
  for (const card of document.querySelectorAll(".card")) {
    const c = card.getBoundingClientRect();
    out.card_widths.push(c.width);
    for (const [n, r] of boxes(card))
      if (r.right > c.right + 1 || r.left < c.left - 1) out.cards.push(say(n, r));
  }
  for (const img of document.querySelectorAll("img")) {
    const src = img.getAttribute("src");
    if (!src.startsWith("data:image/svg+xml;base64,")) continue;
    const svg = new DOMParser().parseFromString(atob(src.split(",")[1]), "image/svg+xml");
    for (const t of svg.querySelectorAll("text")) out.svg_text.push(t.textContent);
  }
  return out;
})();"""


def layout(page: Path, width: int, tmp: Path) -> dict:
    """What :data:`MEASURE` finds in ``page`` in a viewport ``width`` CSS px wide."""
    with Browser(CHROMIUM, tmp / f"profile-{width}") as browser:
        browser.open(page, width)
        return browser.evaluate(MEASURE)


@pytest.fixture(scope="module")
def two_arms(tmp_path_factory):
    """`geodiag report ckpt-mean ckpt-random` as a user would first run it: a mean-resized
    checkpoint without a sidecar (its remedy names transformers' call, a long code span)."""
    tmp = tmp_path_factory.mktemp("two-arms")
    base = base_rows()
    paths = [
        write_checkpoint(
            tmp / f"ckpt-{kind}",
            planted_new_rows(kind, base),
            base=base,
            with_sidecar=False,
            with_codebooks=False,
        )
        for kind in ("mean-noise", "random")
    ]
    files = write_report(paths, tmp / "report.html", opts=ReportOptions(n_permutations=20))
    return files.html, tmp


@pytest.mark.parametrize("width", [1400, 390])
def test_two_arm_report_fits_its_cards_and_the_page(two_arms, width):
    page, tmp = two_arms
    assert "mean_resizing" in page.read_text()  # the long code span is on the page
    found = layout(page, width, tmp)
    assert found["width"] == width
    assert found["scroll_width"] <= width  # the page never scrolls sideways
    assert found["page"] == []  # nothing past the viewport but inside a scrolling table
    assert found["cards"] == []  # nothing past its card: inline code wraps
    assert len(found["card_widths"]) == 2
    # wide cards, one per row, at a desktop's width (not two tall 40% columns)
    assert all(w >= found["main_width"] - 1 for w in found["card_widths"]), found


def test_two_arm_report_figures_draw_tick_labels_as_math(two_arms):
    page, tmp = two_arms
    texts = ["".join(t.split()) for t in layout(page, 1400, tmp)["svg_text"]]
    assert texts and not [t for t in texts if "mathdefault" in t or "$" in t or "^{" in t]
    # the log axes' labels drawn as math: 10 and its exponent, one glyph at a time ("10−2")
    powers = [t for t in texts if re.fullmatch("10[−-]?[0-9]+", t)]
    assert len(powers) >= 2, texts  # on both log axes of the spectra


# Evaluated in the page: the scrolling boxes whose table is wider than the box, by the
# text of the table's first header row.
CLIPPED = """(() => [...document.querySelectorAll(".scroll")]
  .filter(b => b.scrollWidth > b.clientWidth + 1)
  .map(b => { const th = b.querySelector("thead tr"); return th ? th.textContent.trim() : ""; })
)();"""


@pytest.fixture(scope="module")
def with_drift(tmp_path_factory):
    """A report with an init -> SFT pair and three SID levels: the drift table's widest case
    of one pair, and the per-token counts table."""
    tmp = tmp_path_factory.mktemp("with-drift")
    paths = write_set(tmp / "ckpts")
    files = write_report(paths, tmp / "report.html", opts=ReportOptions(n_permutations=20))
    return files.html, tmp


def test_the_drift_and_count_tables_fit_a_desktop_page(with_drift):
    """At 1400 px the drift table (pair, matrix, cosines, RSA per level) and the per-token
    counts were wider than the page and cut at its edge (issue 50): their headers wrap."""
    page, tmp = with_drift
    assert 'id="drift"' in page.read_text() and "structure RSA" in page.read_text()
    with Browser(CHROMIUM, tmp / "profile-clipped") as browser:
        browser.open(page, 1400)
        clipped = browser.evaluate(CLIPPED)
    assert not [t for t in clipped if t.startswith("pair") or t.startswith("checkpointgate")], (
        clipped
    )


# Evaluated in the page: per SVG figure, its drawn width over its viewBox's, times the font
# size of its smallest text of 7 units or more (ticks, legends, titles; the superscripts of a
# log axis' tick labels are smaller by design).
FIGURE_TEXT = """(() => [...document.querySelectorAll("figure img")].flatMap(img => {
  const src = img.getAttribute("src");
  if (!src.startsWith("data:image/svg+xml;base64,")) return [];
  const svg = new DOMParser().parseFromString(atob(src.split(",")[1]), "image/svg+xml");
  const box = svg.documentElement.getAttribute("viewBox").split(" ").map(Number);
  const sizes = [...svg.querySelectorAll("text")]
    .map(t => parseFloat((t.getAttribute("style") || "").replace(/.*font-size: ([0-9.]+)px.*/, "$1")))
    .filter(s => s >= 7);
  return sizes.length ? [Math.min(...sizes) * img.getBoundingClientRect().width / box[2]] : [];
}))();"""


def test_figure_text_is_readable_on_a_phone(with_drift):
    """At 390 px the figures were shrunk to the page and their 7-9 pt text drawn 3-4 px tall
    (issue 50): a phone shows them FIGURE_MIN_PX wide, scrolled sideways."""
    from geodiag.outputs.report.html import FIGURE_MIN_PX

    page, tmp = with_drift
    with Browser(CHROMIUM, tmp / "profile-phone") as browser:
        browser.open(page, 390)
        smallest = browser.evaluate(FIGURE_TEXT)
        found = browser.evaluate(MEASURE)
    assert len(smallest) >= 3  # the spectra, drift and row-norm figures, at least
    # 7 units of a figure FIGURE_MIN_PX wide: at least 7 * 800 / 1056 * 4/3 px, about 7 px
    assert min(smallest) >= 6.5, smallest
    assert found["scroll_width"] <= 390  # the figures scroll inside their box, not the page
    assert FIGURE_MIN_PX >= 800
