"""The files derived from the format registry are current: .pre-commit-hooks.yaml's
``files:`` patterns and docs/stacks.md's table of formats (``python -m tools.format_docs``
rewrites them), and the hook's pattern takes every registered format's files."""

from __future__ import annotations

import re

import yaml

from geodiag.io.formats.registry import formats
from geodiag.precommit import HOOK_FILES
from tools import format_docs


def test_the_committed_files_are_current():
    for filename, render in format_docs.RENDERS.items():
        text = (format_docs.ROOT / filename).read_text(encoding="utf-8")
        assert render(text) == text, f"{filename} is stale: run {format_docs.REGENERATE}"


def test_each_hook_reads_its_pattern_back():
    hooks = yaml.safe_load((format_docs.ROOT / format_docs.HOOKS).read_text(encoding="utf-8"))
    assert {h["id"]: h["files"] for h in hooks} == HOOK_FILES


def test_a_stale_pattern_is_rewritten():
    text = (format_docs.ROOT / format_docs.HOOKS).read_text(encoding="utf-8")
    stale = text.replace(HOOK_FILES["geodiag-check"], r"(^|/)model\.safetensors$", 1)
    assert stale != text and format_docs.render_hooks(stale) == text


def test_every_format_table_row_and_hook_file():
    table = format_docs.render_table(f"{format_docs.BEGIN}\n{format_docs.END}\n")
    for fmt in formats():
        assert f"| {fmt.name} | {fmt.what} |" in table
    # the hook takes a file named by each format's patterns, in any folder
    hook = re.compile(HOOK_FILES["geodiag-check"])
    examples = {
        "GGUF": "out/model-Q8_0.gguf",
        "torch.distributed.checkpoint": "run/pytorch_model_fsdp_0/__0_0.distcp",
        "DeepSpeed ZeRO": "run/global_step2/mp_rank_00_model_states.pt",
        "sharded safetensors": "ck/model-00001-of-00002.safetensors",
    }
    for name, path in examples.items():
        assert name in {fmt.name for fmt in formats()} and hook.search(path), name
    assert not hook.search("src/model.py") and not hook.search("notmodel.safetensors.bak")
