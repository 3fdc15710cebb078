"""Formats recognised but not read: each one's exit-2 message names what it is and the
command that converts it to one geodiag reads (a DeepSpeed folder in a layout
``geodiag.io.formats.zero`` does not read, one of its ``*model_states.pt`` given alone,
sharded ``.bin``, TensorFlow, Flax, ONNX).
"""

from __future__ import annotations

from pathlib import Path

from geodiag.errors import InputError
from geodiag.io.formats.format import Format, RemoteCheckpoint, SmallFiles
from geodiag.io.formats.zero import REMOTE as ZERO_REMOTE
from geodiag.io.formats.zero import zero_to_fp32_advice
from geodiag.io.sources.layouts import zero_folder

NOT_BY_URL = "not read by URL either: download it and convert it as the local message says"


def _deepspeed(p: Path) -> Path | None:
    if p.is_file():
        return None
    zero = sorted(d for d in p.glob("global_step*") if d.is_dir() and any(d.glob("*states.pt")))
    return zero[-1] if zero else None


def _model_states(p: Path) -> Path | None:
    """A DeepSpeed ``*model_states.pt`` given as a file (ZeRO-3's, ZeRO-1/2's: by its name,
    which DeepSpeed's save_checkpoint gives it and no plain state dict has)."""
    return p if p.is_file() and p.name.endswith(MODEL_STATES) else None


def _model_states_way_out(found: Path) -> str:
    tag = found.parent
    folder = f"pass its folder, {tag}/" if zero_folder(tag) else "pass the global_stepN/ folder"
    return (
        "a DeepSpeed model-states file, not the weights: under ZeRO-3 its module holds "
        "placeholders, the weights partitioned over the ranks' *_optim_states.pt "
        f"(zero_pp_rank_*) beside it; geodiag reads the ZeRO folder: {folder} (or the one "
        f"above it, whose 'latest' names the tag), or {zero_to_fp32_advice(tag.parent)}"
    )


def _named(name: str):
    return lambda p: None if p.is_file() else (p / name if (p / name).is_file() else None)


def _asked(name: str, way_out):
    """A URL folder's probe for ``name`` (a URL cannot be listed), asked only once every
    format read by URL has said no: named, with the local way out."""

    def url(remote, asked: str | None, small: SmallFiles) -> RemoteCheckpoint | None:
        if asked is None and remote.exists(name):
            raise InputError(remote.shown(name), f"{way_out(Path(name))}; {NOT_BY_URL}")
        return None

    return url


def _save_pretrained(what: str):
    return lambda found: (
        f"{what} ({found.name}), not read: save the model with transformers' "
        "save_pretrained (safetensors) and check that folder"
    )


def _sharded_bin(found: Path) -> str:
    return (
        "sharded .bin checkpoints are not read: load and save_pretrained it with "
        "safe_serialization=True (the default), or convert the shards to safetensors"
    )


DEEPSPEED = Format(
    name="DeepSpeed, other layouts",
    what="a DeepSpeed `global_stepN/` whose files are not ZeRO partitions geodiag reads",
    find=_deepspeed,
    way_out=lambda found: (
        f"a DeepSpeed checkpoint ({found.name}/) in a layout geodiag does not read (it "
        "reads ZeRO-1/2/3 partitions, *model_states.pt with *_optim_states.pt, and "
        f"universal folders): {zero_to_fp32_advice(found.parent)}"
    ),
    remote=ZERO_REMOTE,  # by URL its 'latest' is all a folder shows: ZeRO's entry names it
)
MODEL_STATES = "model_states.pt"
ZERO_MODEL_STATES = Format(
    name="DeepSpeed model states, alone",
    what="one DeepSpeed `*model_states.pt` given as a file (ZeRO-3's holds no weights)",
    find=_model_states,
    way_out=_model_states_way_out,
    remote="a DeepSpeed model-states file is not the weights, nor read by URL: download "
    "its global_stepN/ folder and check that",
    files=(r"[^/]*model_states\.pt",),
)
SHARDED_BIN = Format(
    name="sharded .bin",
    what="`pytorch_model-*.bin` shards and their `pytorch_model.bin.index.json`",
    find=_named("pytorch_model.bin.index.json"),
    way_out=_sharded_bin,
    url=_asked("pytorch_model.bin.index.json", _sharded_bin),
    remote=NOT_BY_URL,
)


def _other_framework(name: str, kind: str, file: str) -> Format:
    """Another framework's weights, one file: recognised, never read, on disk or by URL;
    the way out is transformers' save_pretrained."""
    return Format(
        name=name,
        what=f"{kind} (`{file}`)",
        find=_named(file),
        way_out=_save_pretrained(kind),
        url=_asked(file, _save_pretrained(kind)),
        remote=NOT_BY_URL,
    )


TENSORFLOW = _other_framework("TensorFlow", "a TensorFlow/Keras checkpoint", "tf_model.h5")
FLAX = _other_framework("Flax", "a Flax checkpoint", "flax_model.msgpack")
ONNX = _other_framework("ONNX", "an ONNX export", "model.onnx")
