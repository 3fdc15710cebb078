"""Paths that hold a checkpoint geodiag does not read as it stands, and what to do with them.

- a Hugging Face Hub cache root (``models--ORG--NAME/`` with ``refs/`` and ``snapshots/``):
  read through the snapshot ``refs/main`` names (:func:`resolve_hub_cache`);
- a Git LFS pointer in place of a weights file (``git clone`` without git-lfs: ~130 bytes
  of text): named, with ``git lfs pull`` (:func:`lfs_pointer_problem`);
- a torch.distributed.checkpoint folder, or FSDP's ``pytorch_model_fsdp_0/`` inside a
  checkpoint folder: found here (:func:`dcp_weights`), read by ``geodiag.io.dcp``;
- formats with no reader yet (DeepSpeed ZeRO's ``global_step*/``, sharded ``.bin``, TF,
  Flax, ONNX): the format and the command that converts it (:func:`unread_layout`).

Each problem is an exit-2 message naming the format and the way out; nothing here reads
tensors.
"""

from __future__ import annotations

from pathlib import Path

from geodiag.errors import InputError, cannot_read

LFS_SPEC = b"version https://git-lfs.github.com/spec/"
# A pointer file is a few short lines (version, oid, size); anything larger is not one.
LFS_POINTER_MAX_BYTES = 1024
# Where accelerate (and the Trainer through it) saves a sharded FSDP model: one per model.
FSDP_SUBFOLDERS = "pytorch_model_fsdp_*"
# A PEFT adapter folder's files (read by geodiag.io.peft_adapter, fetched by geodiag.io.remote).
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


def dcp_weights(p: Path) -> Path | None:
    """The DCP folder holding ``p``'s weights: ``p`` itself, or the one FSDP subfolder
    (``pytorch_model_fsdp_0/``, as the Trainer and accelerate's ``save_state`` write with
    a sharded state dict) of a checkpoint folder; None when there is neither."""
    if dcp_folder(p):
        return p
    fsdp = sorted(d for d in p.glob(FSDP_SUBFOLDERS) if d.is_dir() and dcp_folder(d))
    if len(fsdp) > 1:
        raise InputError(
            p,
            f"several FSDP sharded models ({', '.join(d.name for d in fsdp)}): pass the "
            "folder of the one to read",
        )
    return fsdp[0] if fsdp else None


def unread_layout(p: Path) -> str | None:
    """What the folder ``p`` holds when geodiag finds no weights it reads, and the command
    that converts it; None when it recognizes nothing."""
    zero = sorted(d for d in p.glob("global_step*") if d.is_dir() and any(d.glob("*states.pt")))
    if zero:
        here = p / "zero_to_fp32.py"
        script = here if here.is_file() else "zero_to_fp32.py"
        return (
            f"a DeepSpeed ZeRO checkpoint ({zero[-1].name}/: per-rank partitions), not read "
            f"yet: consolidate it with `python {script} {p} OUT/ --safe_serialization` "
            "(DeepSpeed saves the script beside the partitions), or save with "
            "stage3_gather_16bit_weights_on_model_save"
        )
    if (p / "pytorch_model.bin.index.json").is_file():
        return (
            "sharded .bin checkpoints are not read: load and save_pretrained it with "
            "safe_serialization=True (the default), or convert the shards to safetensors"
        )
    for name, what in (
        ("tf_model.h5", "a TensorFlow/Keras checkpoint"),
        ("flax_model.msgpack", "a Flax checkpoint"),
        ("model.onnx", "an ONNX export"),
    ):
        if (p / name).is_file():
            return (
                f"{what} ({name}), not read: save the model with transformers' "
                "save_pretrained (safetensors) and check that folder"
            )
    return None
