"""Paths that hold a checkpoint geodiag does not read as it stands, and what to do with them.

- a Hugging Face Hub cache root (``models--ORG--NAME/`` with ``refs/`` and ``snapshots/``):
  read through the snapshot ``refs/main`` names (:func:`resolve_hub_cache`);
- a Git LFS pointer in place of a weights file (``git clone`` without git-lfs: ~130 bytes
  of text): named, with ``git lfs pull`` (:func:`lfs_pointer_problem`);
- a torch.distributed.checkpoint folder, or FSDP's ``pytorch_model_fsdp_0/`` inside a
  checkpoint folder: found here (:func:`dcp_weights`), read by ``geodiag.io.formats.dcp``;
- a DeepSpeed ZeRO checkpoint (``global_stepN/`` partitions, named by ``latest``, or
  ``ds_to_universal.py``'s universal folder): found here (:func:`zero_weights`), read by
  ``geodiag.io.formats.zero``;
- formats with no reader yet (sharded ``.bin``, TF, Flax, ONNX, and DeepSpeed folders
  ``geodiag.io.formats.zero`` does not read): the format and the command that converts it
  (:func:`unread_layout`, :func:`zero_to_fp32_advice`).

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


def zero_folder(p: Path) -> bool:
    """A DeepSpeed ZeRO tag folder (``*model_states.pt`` beside ``*_optim_states.pt``) or a
    universal one (``zero/`` beside, as ``ds_to_universal.py`` writes)."""
    return any(p.glob("*model_states.pt")) and (
        any(p.glob("*_optim_states.pt")) or (p / "zero").is_dir()
    )


def zero_weights(p: Path) -> Path | None:
    """The DeepSpeed ZeRO folder holding ``p``'s weights: ``p`` itself, the tag its
    ``latest`` names (what DeepSpeed loads), else its one ``global_step*/``; None when
    there is none."""
    if zero_folder(p):
        return p
    latest = p / ZERO_LATEST
    if latest.is_file():
        try:
            tag = latest.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(latest, f"cannot read the tag it names ({e})") from None
        if not tag or "/" in tag or not zero_folder(p / tag):
            raise InputError(
                latest,
                f"names tag '{tag}', which is not a ZeRO checkpoint folder in {p}: pass the "
                "global_step*/ folder to read",
            )
        return p / tag
    steps = sorted(d for d in p.glob("global_step*") if d.is_dir() and zero_folder(d))
    if len(steps) > 1:
        raise InputError(
            p,
            f"several DeepSpeed tags ({', '.join(d.name for d in steps)}) and no 'latest': "
            "pass the global_step*/ folder to read",
        )
    return steps[0] if steps else None


def zero_to_fp32_advice(p: Path | None = None) -> str:
    """How to consolidate a DeepSpeed checkpoint folder ``p`` geodiag does not read."""
    here = p / "zero_to_fp32.py" if p is not None else None
    script = here if here is not None and here.is_file() else "zero_to_fp32.py"
    return (
        f"consolidate it with `python {script} {p or 'CHECKPOINT'} OUT/ --safe_serialization` "
        "(DeepSpeed saves the script beside the partitions), or save with "
        "stage3_gather_16bit_weights_on_model_save"
    )


def unread_layout(p: Path) -> str | None:
    """What the folder ``p`` holds when geodiag finds no weights it reads, and the command
    that converts it; None when it recognizes nothing."""
    zero = sorted(d for d in p.glob("global_step*") if d.is_dir() and any(d.glob("*states.pt")))
    if zero:
        return (
            f"a DeepSpeed checkpoint ({zero[-1].name}/) in a layout geodiag does not read (it "
            "reads ZeRO-1/2/3 partitions, *model_states.pt with *_optim_states.pt, and "
            f"universal folders): {zero_to_fp32_advice(p)}"
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
