"""``geodiag-pre-commit``: the pre-commit hook's entry. pre-commit passes changed *files*;
``geodiag check`` gates checkpoint *folders*. This maps each changed checkpoint file
(any registered format's weights, shard index, sidecar, codebooks, adapter, config,
tokenizer) to its folder, once per folder (a lone GGUF file to itself), and runs ``geodiag check`` on those folders with the hook's ``args``.

A changed file in a folder without weights (a lone config.json) checks nothing; with no
checkpoint folder among the files the hook passes. Exit codes are ``geodiag check``'s.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from geodiag.io.formats.registry import file_pattern, recognise

# The files read beside the weights (the sidecar and codebooks; config and tokenizer):
# a change to one re-checks its folder as a change to the weights does.
SIDECAR_FILES = (r"semantic_ids\.json", r"codebooks\.safetensors")
CONFIG_FILES = (r"config\.json", r"tokenizer\.json")
# Files that belong to a checkpoint: every registered format's (geodiag.io.formats.registry)
# and those beside them; .pre-commit-hooks.yaml's `files:` patterns are rendered from
# HOOK_FILES by `python -m tools.format_docs` (a test fails when they differ).
CHECKPOINT_FILE = re.compile(file_pattern(SIDECAR_FILES + CONFIG_FILES))
HOOK_FILES = {
    "geodiag-check": CHECKPOINT_FILE.pattern,
    "geodiag-check-paths": file_pattern(SIDECAR_FILES),
}


def _target(path: Path) -> Path | None:
    """What a changed checkpoint file makes the hook check: its folder when that holds
    weights geodiag reads, else the file itself when it is one (a GGUF file), else nothing
    (a lone config.json; a format recognised but not read is left to ``geodiag check``)."""
    for candidate in (path.parent, path):
        found = recognise(candidate)
        if found is not None and (found[0].open is not None or found[0].over_base):
            return candidate
    return None


def split_args(argv: list[str]) -> tuple[list[str], list[Path]]:
    """(arguments for ``geodiag check``, checkpoint folders) from the hook's argv.

    Arguments are kept as given, except existing files whose name marks a checkpoint
    file: those become their folder (kept when it holds weights; a lone weights file
    itself), each once.
    """
    options, folders = [], []
    for arg in argv:
        path = Path(arg)
        if not arg.startswith("-") and CHECKPOINT_FILE.search(path.as_posix()) and path.is_file():
            target = _target(path)
            if target is not None and target not in folders:
                folders.append(target)
            continue
        options.append(arg)
    return options, folders


def main(argv: list[str] | None = None) -> None:
    from geodiag.cli import app

    options, folders = split_args(list(sys.argv[1:] if argv is None else argv))
    if not folders:
        print("geodiag: no checkpoint folder among the changed files; nothing to check")
        raise SystemExit(0)
    app(["check", *map(str, folders), *options], prog_name="geodiag")


if __name__ == "__main__":
    main()
