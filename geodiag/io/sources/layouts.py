"""Paths that hold a checkpoint geodiag does not read as it stands, and what to do with them.

- a Hugging Face Hub cache root (``models--ORG--NAME/`` with ``refs/`` and ``snapshots/``):
  read through the snapshot ``refs/main`` names (:func:`resolve_hub_cache`);
- a Git LFS pointer in place of a weights file (``git clone`` without git-lfs: ~130 bytes
  of text): named, with ``git lfs pull`` (:func:`lfs_pointer_problem`);
- the names the formats' folders are found by (FSDP's ``pytorch_model_fsdp_*/``,
  DeepSpeed's ``latest``, a PEFT adapter's files), which ``geodiag.io.formats`` recognises.

Each problem is an exit-2 message naming it and the way out; nothing here reads tensors
(which paths hold which format: ``geodiag.io.formats.registry``).
"""

from __future__ import annotations

from pathlib import Path

from geodiag.errors import InputError, cannot_read

LFS_SPEC = b"version https://git-lfs.github.com/spec/"
# A pointer file is a few short lines (version, oid, size); anything larger is not one.
LFS_POINTER_MAX_BYTES = 1024
# Where accelerate (and the Trainer through it) saves a sharded FSDP model: one per model.
FSDP_SUBFOLDERS = "pytorch_model_fsdp_*"
# The file DeepSpeed's save_checkpoint writes beside its tag folders, naming the last tag.
ZERO_LATEST = "latest"
# The one of them a URL is asked for (a URL cannot be listed): the first model's.
FSDP_FIRST_SUBFOLDER = FSDP_SUBFOLDERS.replace("*", "0")
# A PEFT adapter folder's files (read by geodiag.io.formats.peft_adapter, fetched by geodiag.io.sources.remote).
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def resolve_hub_cache(path: Path) -> tuple[Path, str | None]:
    """(the folder to read, a note) for a Hub cache root: the snapshot named by
    ``refs/main``; any other path comes back as it is, with no note."""
    refs, snapshots = path / "refs", path / "snapshots"
    if not (path.is_dir() and refs.is_dir() and snapshots.is_dir()):
        return path, None
    ref = refs / "main"
    if not ref.is_file():
        names = sorted(p.name for p in refs.iterdir() if p.is_file())
        raise InputError(
            path,
            "a Hugging Face Hub cache folder without refs/main"
            + (f" (refs: {', '.join(names)})" if names else "")
            + ": pass the snapshot to read, snapshots/<commit>",
        )
    try:
        commit = ref.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(ref, f"cannot read the revision it names ({e})") from None
    snapshot = snapshots / commit
    if not commit or "/" in commit or not snapshot.is_dir():
        raise InputError(
            ref,
            f"names snapshot '{commit}', which is not in {snapshots} (an incomplete download?): "
            "download it again, or pass another snapshots/<commit>",
        )
    return snapshot, f"Hub cache: read snapshot {commit[:12]} (refs/main)"


def lfs_pointer_problem(path: Path) -> InputError | None:
    """The error for a Git LFS pointer file in place of ``path``'s content, else None."""
    try:
        if path.stat().st_size > LFS_POINTER_MAX_BYTES:
            return None
        with open(path, "rb") as f:
            head = f.read(len(LFS_SPEC))
    except OSError as e:
        return cannot_read(path, e)
    if head != LFS_SPEC:
        return None
    return InputError(
        path,
        "a Git LFS pointer, not the file itself (the repository was cloned without git-lfs): "
        "run `git lfs install && git lfs pull` in the clone, or download the file",
    )


def check_not_lfs_pointer(path: Path) -> None:
    """Raise :func:`lfs_pointer_problem`'s error, if any."""
    if (problem := lfs_pointer_problem(path)) is not None:
        raise problem


def dcp_folder(p: Path) -> bool:
    """A torch.distributed.checkpoint folder: ``.metadata`` beside ``*.distcp`` shards."""
    return (p / ".metadata").is_file() and any(p.glob("*.distcp"))


def zero_folder(p: Path) -> bool:
    """A DeepSpeed ZeRO tag folder (``*model_states.pt`` beside ``*_optim_states.pt``) or a
    universal one (``zero/`` beside, as ``ds_to_universal.py`` writes)."""
    return any(p.glob("*model_states.pt")) and (
        any(p.glob("*_optim_states.pt")) or (p / "zero").is_dir()
    )
