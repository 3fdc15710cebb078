"""Formats recognised but not read: each one's exit-2 message names what it is and the
command that converts it to one geodiag reads (a DeepSpeed folder in a layout
``geodiag.io.formats.zero`` does not read, sharded ``.bin``, TensorFlow, Flax, ONNX).
"""

from __future__ import annotations

from pathlib import Path

from geodiag.errors import InputError
from geodiag.io.formats.format import Format, RemoteCheckpoint, SmallFiles
from geodiag.io.formats.zero import REMOTE as ZERO_REMOTE
from geodiag.io.formats.zero import zero_to_fp32_advice

NOT_BY_URL = "not read by URL either: download it and convert it as the local message says"


def _deepspeed(p: Path) -> Path | None:
    if p.is_file():
        return None
    zero = sorted(d for d in p.glob("global_step*") if d.is_dir() and any(d.glob("*states.pt")))
    return zero[-1] if zero else None


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
SHARDED_BIN = Format(
    name="sharded .bin",
    what="`pytorch_model-*.bin` shards and their `pytorch_model.bin.index.json`",
    find=_named("pytorch_model.bin.index.json"),
    way_out=_sharded_bin,
    url=_asked("pytorch_model.bin.index.json", _sharded_bin),
    remote=NOT_BY_URL,
)
TENSORFLOW = Format(
    name="TensorFlow",
    what="a TensorFlow/Keras checkpoint (`tf_model.h5`)",
    find=_named("tf_model.h5"),
    way_out=_save_pretrained("a TensorFlow/Keras checkpoint"),
    url=_asked("tf_model.h5", _save_pretrained("a TensorFlow/Keras checkpoint")),
    remote=NOT_BY_URL,
)
FLAX = Format(
    name="Flax",
    what="a Flax checkpoint (`flax_model.msgpack`)",
    find=_named("flax_model.msgpack"),
    way_out=_save_pretrained("a Flax checkpoint"),
    url=_asked("flax_model.msgpack", _save_pretrained("a Flax checkpoint")),
    remote=NOT_BY_URL,
)
ONNX = Format(
    name="ONNX",
    what="an ONNX export (`model.onnx`)",
    find=_named("model.onnx"),
    way_out=_save_pretrained("an ONNX export"),
    url=_asked("model.onnx", _save_pretrained("an ONNX export")),
    remote=NOT_BY_URL,
)
