"""Write one transformers + PEFT release pair's folders for test_releases.py.

Run by ``make_fixtures.sh`` in a venv holding those releases (and torch):

    python write_hf.py OUT

``OUT/base``: a tiny Llama (untied head) over a word-level tokenizer, N_NEW tokens added with
``add_tokens`` and the embedding resized, saved by that release's ``save_pretrained`` (model
and tokenizer, a chat template set). ``OUT/adapter``: a PEFT adapter over ``OUT/base``
(LoRA on ``q_proj``, ``modules_to_save=["embed_tokens", "lm_head"]``), its trainable tensors
moved by seeded noise, saved by that PEFT's ``save_pretrained``; ``OUT/adapter_tokens`` the
same with ``trainable_token_indices`` (PEFT 0.15 and later). ``OUT/expected.safetensors``: the
rows geodiag must read, from the releases' own objects: ``base.input`` / ``base.output`` (the
model's embedding and head), ``<adapter>.input`` / ``.output`` (``merge_and_unload()``'s);
``OUT/written_by.json`` names the releases and the new token ids.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

N_WORDS, N_NEW, DIM = 30, 6, 8
TEMPLATE = "{% for m in messages %}<a_0>{{ m['content'] }}<a_1>{% endfor %}"


def _tokenizer():
    import tokenizers
    import transformers

    vocab = {"<unk>": 0, **{f"w{i}": i + 1 for i in range(N_WORDS)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def _base(out: Path):
    import torch
    import transformers

    tok = _tokenizer()
    tok.add_tokens([f"<a_{i}>" for i in range(N_NEW)])
    tok.chat_template = TEMPLATE
    cfg = transformers.LlamaConfig(
        vocab_size=N_WORDS + 1,
        hidden_size=DIM,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    model.resize_token_embeddings(len(tok))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for w in (model.get_input_embeddings().weight, model.get_output_embeddings().weight):
            w[N_WORDS + 1 :] = torch.randn(N_NEW, DIM, generator=g) * w[: N_WORDS + 1].std()
    model.save_pretrained(out / "base")
    tok.save_pretrained(out / "base")
    return model


def _rows(model, prefix: str) -> dict:
    return {
        f"{prefix}.input": model.get_input_embeddings().weight.detach().float().contiguous(),
        f"{prefix}.output": model.get_output_embeddings().weight.detach().float().contiguous(),
    }


def _adapter(out: Path, name: str, **config) -> dict:
    import peft
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(out / "base")
    pm = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj"], **config))
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():  # stand-in for training
        for p in pm.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)
    pm.save_pretrained(out / name)
    (out / name / "README.md").unlink(missing_ok=True)  # PEFT's model card: 5 kB, not read
    return _rows(pm.merge_and_unload(), name)


def main(out: Path) -> None:
    import peft
    import torch
    import transformers
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    expected = _rows(_base(out), "base")
    expected |= _adapter(out, "adapter", modules_to_save=["embed_tokens", "lm_head"])
    new = list(range(N_WORDS + 1, N_WORDS + 1 + N_NEW))
    if tuple(int(x) for x in peft.__version__.split(".")[:2]) >= (0, 15):
        expected |= _adapter(out, "adapter_tokens", trainable_token_indices=new)
    save_file(expected, out / "expected.safetensors")
    written = {
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "torch": torch.__version__,
        "new_token_ids": new,
    }
    (out / "written_by.json").write_text(json.dumps(written, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
