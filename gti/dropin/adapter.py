"""``--adapter``: the new rows as a PEFT adapter (``trainable_token_indices``), the base
model untouched, for teams that fine-tune with LoRA.

The adapter is a LoRA over every linear layer whose B matrices start at zero (a no-op until
trained) plus PEFT's trainable tokens on the input embedding, which hold the initialized
rows themselves (PEFT ties them to the output head when the embeddings are tied). The
framework adds the index's tokens to its tokenizer, resizes the base, and loads the adapter
(``PeftModel.from_pretrained(model, OUT, is_trainable=True)``): the new rows are ours.
"""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedModel

from gti.vocab import VocabExtension

LORA_RANK = 8  # the adapter's LoRA rank; the team's own config usually replaces it


def save_adapter(folder: Path, model: PreTrainedModel, ext: VocabExtension) -> None:
    """Write the adapter of ``model``'s new rows into ``folder`` (``adapter_config.json`` and
    ``adapter_model.safetensors``); ``model`` is wrapped in place."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=LORA_RANK,
        target_modules="all-linear",
        trainable_token_indices=list(ext.new_token_ids),
    )
    peft_model = get_peft_model(model, config)
    # The rows travel as trainable tokens alone, not as a copy of the whole resized matrix.
    peft_model.save_pretrained(folder, save_embedding_layers=False)
