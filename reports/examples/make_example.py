"""Make the example report: reports/examples/example.{html,json} and the screenshot example.png.

    .venv/bin/python reports/examples/make_example.py

It writes five tiny synthetic checkpoints (24 SID tokens in 3 levels of 8 codes,
32 dims, 300 original rows; see bench/_synthetic.py) into a temporary folder and
runs, in that folder, exactly:

    geodiag report mean-init mean-sft random-init gti-init gti-sft \\
        -o example.html --title "Example: mean vs random vs GTI (synthetic)"

then moves the two files here. With chromium installed it also takes the screenshot
used in the README (headless, nothing fetched: the page loads no external resource).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from bench._synthetic import write_synthetic  # noqa: E402

CHECKPOINTS = [
    ("mean", "init"),
    ("mean", "sft"),
    ("random", "init"),
    ("gti", "init"),
    ("gti", "sft"),
]
TITLE = "Example: mean vs random vs GTI (synthetic)"


def screenshot(html: Path, png: Path, height: int = 2300) -> bool:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("chromium not found: no screenshot", file=sys.stderr)
        return False
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--hide-scrollbars", f"--screenshot={png}",
             f"--window-size=1280,{height}", html.as_uri()],
            check=True, capture_output=True, timeout=120,
        )
    from PIL import Image

    Image.open(png).convert("RGB").quantize(colors=256).save(png, optimize=True)
    return True


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        names = []
        for strategy, stage in CHECKPOINTS:
            name = f"{strategy}-{stage}"
            init = f"../{strategy}-init" if stage == "sft" else None  # as gti sft names it
            write_synthetic(Path(tmp) / name, strategy, stage, init_checkpoint=init)
            names.append(name)
        cmd = [
            sys.executable,
            "-m",
            "geodiag.cli",
            "report",
            *names,
            "-o",
            "example.html",
            "--title",
            TITLE,
        ]
        subprocess.run(cmd, cwd=tmp, check=True)
        for suffix in (".html", ".json"):
            shutil.move(Path(tmp) / f"example{suffix}", HERE / f"example{suffix}")
    if screenshot(HERE / "example.html", HERE / "example.png"):
        print(f"wrote {HERE / 'example.png'}")


if __name__ == "__main__":
    main()
