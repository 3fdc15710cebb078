"""``--vehicle peft``: grounding with the new rows inside PEFT's trainable-tokens layer,
written as a PEFT adapter over the unchanged base.

OneRec-Think grounds its item tokens with PEFT's trainable tokens; a team that trains with
PEFT wants grounding to hand it an adapter. :func:`wrap` puts PEFT's
``TrainableTokensConfig`` on the frozen, resized model: PEFT wraps the input embedding
(and, tied, the head with an adapter tied to the embedding's; untied, the head with its
own) and only ``trainable_tokens_delta`` trains. Despite its name the "delta" holds the
rows' *values*: PEFT copies them over the matrix (``index_copy``) rather than adding them,
so it starts as the init rows and is the same (n_new, d) parameter that
:class:`~gti.init.grounding.NewRows` trains. :class:`PeftRows` is a ``NewRows`` whose
tensors *are* PEFT's deltas: the native loop (pair stream, loss, schedule, optimizer,
resume state, stop on signal) runs unchanged, with the same arithmetic, so the rows are
bitwise the native vehicle's (tests/gti/init/test_init_peft_vehicle.py).

What differs from ``--vehicle rows``: the fast path reads the frozen layers under PEFT's
wrappers (``grounding.frozen_layer``) and splices the rows in itself, where PEFT's own
forward would build a merged (V, d) matrix per call (the same logits; tested through
``PeftModel.from_pretrained``); nothing is written back into the model; the output is the
adapter (``adapter_config.json`` + ``adapter_model.safetensors``, the new rows only, its
``base_model_name_or_path`` the backbone's folder) beside the tokenizer with the new tokens,
the sidecar, codebooks, init_config.json and train_log.jsonl, which ``geodiag check`` reads
over the base. A user loads it over the base resized to the tokenizer's length.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from transformers import PreTrainedModel

from geodiag.errors import InputError
from gti.init.grounding import NewRows
from gti.models.backbone import Backbone
from gti.vocab import VocabExtension

ADAPTER_NAME = "default"  # PEFT's; ``save_pretrained`` drops it from the saved keys


def module_name(model: PreTrainedModel, module: object) -> str:
    """The dotted name of ``module`` inside ``model`` (what PEFT's target_modules match)."""
    return next(name for name, m in model.named_modules() if m is module)


def adapter_base(backbone: Backbone) -> str:
    """What the adapter names as its base: the backbone's local folder, else its Hub id.
    A model built in memory has neither: bad input."""
    if backbone.folder is not None:
        return str(backbone.folder)
    if backbone.identity.startswith("hub:"):
        return backbone.name
    raise InputError(
        "--vehicle",
        f"peft writes an adapter over --model's folder; {backbone.name!r} is built in memory: "
        "save it with save_pretrained and pass the folder as --model",
    )


def wrap(model: PreTrainedModel, ext: VocabExtension, base: str):
    """``model`` (resized, new rows initialized, frozen) wrapped by PEFT's trainable tokens
    over ``ext``'s new ids, in their order; returns the ``PeftModel``. ``model`` is changed
    in place (its embedding and head become PEFT's layers)."""
    from peft import TrainableTokensConfig, get_peft_model

    targets = [module_name(model, model.get_input_embeddings())]
    if not ext.tied:  # untied: the head's new rows train too, as NewRows.out
        targets.append(module_name(model, model.get_output_embeddings()))
    config = TrainableTokensConfig(
        token_indices=list(ext.new_token_ids),
        target_modules=targets,
        base_model_name_or_path=base,
    )
    with warnings.catch_warnings():
        # PEFT warns that it cannot tie adapters on a tied layer; trainable tokens tie
        # their own (TrainableTokensModel.inject_adapter), which is what we rely on.
        warnings.filterwarnings("ignore", message=".*tie_word_embeddings=True.*")
        return get_peft_model(model, config, adapter_name=ADAPTER_NAME)


class PeftRows(NewRows):
    """``NewRows`` whose ``inp`` (and, untied, ``out``) are PEFT's trainable-tokens deltas
    of the wrapped model: the loop trains the parameters PEFT saves."""

    def __init__(self, peft_model, ext: VocabExtension) -> None:
        model = peft_model.get_base_model()
        super().__init__(model, ext)  # reads the frozen layers under PEFT's wrappers
        self.inp = model.get_input_embeddings().trainable_tokens_delta[ADAPTER_NAME]
        if self.out is not None:
            self.out = model.get_output_embeddings().trainable_tokens_delta[ADAPTER_NAME]

    def write_back(self, model: PreTrainedModel) -> None:
        """Nothing: the rows are the adapter's (merge with ``merge_and_unload``)."""


def save_adapter(folder: Path, peft_model) -> None:
    """The adapter: the new rows alone (not the resized matrix: the base stays as it is)."""
    peft_model.save_pretrained(folder, save_embedding_layers=False)
