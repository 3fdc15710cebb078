"""Writes effective_configs.json: what every configs/*.toml resolves to, as its entry point
(`gti experiment`, or `gti study` for the files with a `work` key) reads it.

Run from the repository root: ``python tests/gti/experiment/effective_configs.py``. The
committed file was written before the presets moved into gti/presets/ (issue 22);
test_effective_configs.py checks that the files still resolve to it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
GOLDEN = HERE / "effective_configs.json"


def effective(path: Path) -> dict[str, object]:
    """The resolved config of ``path`` as JSON data."""
    from geodiag.jsonio import dumps
    from gti.experiment.config import load_config, read_config
    from gti.study.config import load_study_config

    study = "work" in read_config(path)
    cfg = load_study_config(path) if study else load_config(path)
    return {"entry": "study" if study else "experiment", "config": json.loads(dumps(cfg))}


def main() -> None:
    root = HERE.parents[2]
    docs = {
        p.name: effective(p.relative_to(root)) for p in sorted((root / "configs").glob("*.toml"))
    }
    GOLDEN.write_text(json.dumps(docs, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)


if __name__ == "__main__":
    main()
