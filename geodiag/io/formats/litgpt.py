"""litgpt's checkpoint folder (``litgpt download``, ``litgpt convert_to_litgpt``, a
finetune's ``final/``): ``lit_model.pth``, a ``torch.save`` state dict named litgpt's way
(``transformer.wte.weight``, ``transformer.h.N.attn.qkv.weight``, ``lm_head.weight``),
beside ``model_config.yaml`` (``vocab_size``, ``padded_vocab_size``, ``n_embd``) and the
tokenizer files it was converted with. Read as a torch pickle is
(:class:`~geodiag.io.formats.torch_pickle.TorchStore`); a ``lit_model.pth`` that wraps the
state dict under ``model`` (Fabric's save of ``{"model": model}``) as a training
checkpoint is (:mod:`geodiag.io.formats.torch_training`). The rows past ``vocab_size``
that litgpt pads the embedding with are no token's: the tokenizer beside says which are.
"""

from __future__ import annotations

from pathlib import Path

from geodiag.io.formats import torch_training
from geodiag.io.formats.format import Format, on_disk_only, one_file
from geodiag.io.formats.tensor_store import TensorStore
from geodiag.io.formats.torch_pickle import TorchStore
from geodiag.io.sources.layouts import check_not_lfs_pointer

CHECKPOINT = "lit_model.pth"
CONFIG = "model_config.yaml"


def find(path: Path) -> Path | None:
    """``lit_model.pth`` itself, or a folder's."""
    return one_file(path, (CHECKPOINT,))


def _open(found: Path, asked: Path) -> TensorStore:
    check_not_lfs_pointer(found)
    if torch_training.find(found) is not None:  # {"model": state_dict}: read without torch
        return torch_training.TrainingCheckpointStore(found)
    store = TorchStore(found)
    store.description = f"litgpt checkpoint {found.name}"
    return store


REMOTE = f"litgpt's {CHECKPOINT} is a pickle, read from a local folder only: download it"


FORMAT = Format(
    name="litgpt",
    what=f"litgpt's checkpoint folder: `{CHECKPOINT}` (`transformer.wte.weight`) beside "
    f"`{CONFIG}`, through torch's `weights_only=True`",
    find=find,
    open=_open,
    url=on_disk_only(CHECKPOINT, REMOTE),  # a URL folder with lit_model.pth: named, not read
    remote=REMOTE,
    files=(r"lit_model\.pth", r"model_config\.yaml"),
)
