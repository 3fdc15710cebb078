"""``geodiag-pre-commit``: the pre-commit hook's entry. pre-commit passes changed *files*;
``geodiag check`` gates checkpoint *folders*. This maps each changed checkpoint file
(weights, shard index, sidecar, codebooks, adapter, config, tokenizer) to its folder,
once per folder, and runs ``geodiag check`` on those folders with the hook's ``args``.

A changed file in a folder without weights (a lone config.json) checks nothing; with no
checkpoint folder among the files the hook passes. Exit codes are ``geodiag check``'s.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# Files that belong to a checkpoint folder; the hook's default `files:` pattern matches these.
CHECKPOINT_FILE = re.compile(
    r"(^|/)(model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json|pytorch_model\.bin"
    r"|adapter_model\.safetensors|adapter_config\.json|semantic_ids\.json|codebooks\.safetensors"
    r"|config\.json|tokenizer\.json)$"
)
WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "adapter_model.safetensors",
)


def _has_weights(folder: Path) -> bool:
    return any((folder / w).is_file() for w in WEIGHTS) or any(folder.glob("model-*.safetensors"))


def split_args(argv: list[str]) -> tuple[list[str], list[Path]]:
    """(arguments for ``geodiag check``, checkpoint folders) from the hook's argv.

    Arguments are kept as given, except existing files whose name marks a checkpoint
    file: those become their folder (kept when it holds weights), each folder once.
    """
    options, folders = [], []
    for arg in argv:
        path = Path(arg)
        if not arg.startswith("-") and CHECKPOINT_FILE.search(path.as_posix()) and path.is_file():
            folder = path.parent
            if _has_weights(folder) and folder not in folders:
                folders.append(folder)
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
