"""Every code block of README.md and docs/*.md runs as written.

Each fenced ``python``, ``bash`` or ``sh`` block runs in a folder that holds, at the paths
the blocks name, small checkpoints of the kinds they name (:func:`build_world`): a python
block in a fresh interpreter, a shell block one command line at a time (``geodiag check``
may exit 1, a failed gate; every other command 0). A block that cannot run here says why
in an HTML comment on the line above its fence, ``<!-- not run: REASON -->``; its
``geodiag`` and ``gti`` command lines are still parsed by the commands themselves (every
option exists and takes the value given). :data:`NOT_RUN_MAX` keeps that list short.

The README's install list is checked against pyproject.toml: every extra a user installs
(all but ``test``) is listed, and every ``geodiag[...]`` the code tells a user to install
is one of them.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("python", "bash", "sh")
NOT_RUN = re.compile(r"<!-- not run: (.+?) -->")
NOT_RUN_MAX = 8  # PyPI installs, gti's training runs, llama.cpp builds, live stores: each says
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
USER_EXTRAS_ONLY_FOR_DEVELOPERS = {"test"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    not_run: str | None  # the reason, when marked

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, language = m[1], m[2]
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        if language in LANGUAGES:
            code = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : end])
            marker = NOT_RUN.search(lines[i - 1]) if i else None
            out.append(Block(page, i + 1, language, code, marker[1] if marker else None))
        i = end + 1
    return out


BLOCKS = [b for page in PAGES for b in blocks(page)]


def command_lines(code: str) -> list[str]:
    """The shell block's commands, comments dropped, one per line (``a; b``: two)."""
    out = []
    for line in code.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.startswith("#") else ""
        out += [part.strip() for part in line.split(";") if part.strip()]
    return out


# ---- the folder the blocks run in ---------------------------------------------------


def tiny_hf_model(path: Path, seed: int) -> None:
    """A save_pretrained folder whose tokenizer has SID tokens added (<a_0> .. <b_7>)."""
    from tests.geodiag.tiny_models import save, tiny_lm, word_tokenizer

    tok = word_tokenizer(100)
    tok.add_special_tokens({"pad_token": "<pad>"})  # as real tokenizers have (a Trainer pads)
    tok.add_tokens([f"<{lv}_{c}>" for lv in "ab" for c in range(8)])
    save(tiny_lm(len(tok), hidden_size=16, seed=seed), path, tok)


def trajectory(path: Path) -> None:
    """A trajectory file as GeodiagCallback and gti's grounding write them."""
    import json

    from geodiag.gate.checks import CheckName

    lines = [
        {
            "step": step,
            "structure": {
                CheckName.EFFECTIVE_RANK_RATIO.value: 0.1 + step / 100,
                CheckName.SPREAD_RELATIVE.value: step / 50,
                CheckName.MEAN_PAIRWISE_COSINE.value: 1 - step / 60,
            },
        }
        for step in range(0, 50, 10)
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def lora_run(root: Path) -> None:
    """docs/stacks.md's PEFT run: a base resized to Qwen3's 152,437 rows (hidden 16), and a
    LoRA adapter over it that trains the 768 new tokens, its base named relative to the
    folder the commands run in."""
    import json

    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    from tests.geodiag.tiny_models import tiny_lm

    base = root / "models/Qwen3-0.6B-resized"
    tiny_lm(152_437, hidden_size=16, seed=2).save_pretrained(base)
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    new = list(range(151_669, 152_437))
    cfg = LoraConfig(r=4, target_modules=["q_proj"], trainable_token_indices=new)
    adapter = get_peft_model(model, cfg)
    with torch.no_grad():  # stand-in for training: every trainable tensor moves
        g = torch.Generator().manual_seed(1)
        for p in adapter.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)
    out = root / "runs/lora/checkpoint-500"
    adapter.save_pretrained(out)
    config = json.loads((out / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "models/Qwen3-0.6B-resized"
    (out / "adapter_config.json").write_text(json.dumps(config))


# docs/stacks.md's frameworks: the checkpoint, SID map and codebooks each block names,
# written as the framework writes them (tests/geodiag/io/vocabulary/sids/sid_frameworks.py)
STACKS = {
    "lcrec": (
        "runs/lcrec-sft",
        "data/Games/Games.index.json",
        "rqvae/Games/best_collision_model.pth",
    ),
    "minionerec": (
        "runs/minionerec-sft",
        "data/Amazon/index/Games.index.json",
        "data/Amazon/index/Games.codebooks_constrained.npz",
    ),
    "grid": (
        "runs/grid-sft",
        "logs/inference/merged_predictions_tensor.pt",
        "logs/train/checkpoints/last.ckpt",
    ),
    "etegrec": ("runs/etegrec-sft", "saved/12.code.json", "saved/12.pt.rqvae"),
    "openonerec": ("runs/openonerec-sft", "emb_codes.parquet", "res_kmeans/model.pt"),
    "semantic_ids_llm": (
        "runs/semantic-ids-llm-sft",
        "data/output/Video_Games_items_with_semantic_ids.parquet",
        "models/final_rqvae_model.pth",
    ),
}


def sid_stacks(root: Path) -> None:
    from tests.geodiag.io.vocabulary.sids.sid_frameworks import FRAMEWORKS, write_model

    for name, (ckpt, sids, books) in STACKS.items():
        writer, spelling, extra = FRAMEWORKS[name]
        files = writer(root / ".frameworks" / name)
        write_model(root / ckpt, spelling, "structured", extra)
        for key, to in (("sids", sids), ("codebooks", books)):
            (root / to).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(files[key], root / to)
    shutil.rmtree(root / ".frameworks")


def demo_arms(root: Path) -> None:
    """``make demo``'s run folder, test-sized, at ``runs/demo`` (tests/gti/sft/demo_run.py):
    the README's snippets run on its grounded arm, whose dead codes are untrained (at their
    init, identical) yet fed by nothing: a check that reads the folder's SID map passes
    them (``assert result.passed``), one that counted them would fail."""
    for folder in ("gti", "gti/sft"):
        if str(ROOT / "tests" / folder) not in sys.path:
            sys.path.insert(0, str(ROOT / "tests" / folder))
    from demo_run import build_demo_isolated

    build_demo_isolated(root / ".demo-world", root / ".gti-cache", out=root / "runs/demo")


def build_world(root: Path) -> Path:
    """The checkpoints the blocks name, each the smallest of its kind."""
    from geodiag.io.formats.safetensors import save_file
    from tests.geodiag.geodiag_fixtures import DIM, base_rows, planted_new_rows, write_checkpoint

    base = base_rows()
    for name, kind in (("runs/init", "mean"), ("runs/final", "grounded")):
        write_checkpoint(root / name, planted_new_rows(kind, base), base=base)
    for i, step in enumerate((10, 20)):
        rows = planted_new_rows("grounded", base, seed=3 + i)
        write_checkpoint(root / "runs/sft" / f"checkpoint-{step}", rows, with_sidecar=False)
    trajectory(root / "runs/sft/geodiag_trajectory.jsonl")
    # docs/report.md's pairing examples: an init and the SFT whose sidecar names it, two
    # arms, and a before the user pairs by hand
    gti = {"init_strategy": "gti", "seed": 0}
    write_checkpoint(
        root / "runs/gti/init",
        planted_new_rows("grounded", base),
        base=base,
        provenance={**gti, "stage": "init", "step": 0},
    )
    write_checkpoint(
        root / "runs/gti/sft",
        planted_new_rows("grounded", base) + np.random.default_rng(7).normal(size=(24, DIM)),
        base=base,
        provenance={**gti, "stage": "sft", "step": 800, "init_checkpoint": "../init"},
    )
    for name, kind in (("ckpt-mean", "mean"), ("ckpt-random", "random")):
        write_checkpoint(root / name, planted_new_rows(kind, base), base=base)
    write_checkpoint(root / "base-resized", planted_new_rows("mean", base), base=base)
    write_checkpoint(root / "ckpt-sft", planted_new_rows("grounded", base), base=base)
    demo_arms(root)
    tiny_hf_model(root / "runs/ml100k/gti/init", seed=0)
    tiny_hf_model(root / "runs/ml100k/gti/sft", seed=1)
    trajectory(root / "runs/ml100k/gti/init/train_log.jsonl")
    lora_run(root)
    sid_stacks(root)
    rng = np.random.default_rng(0)
    books = {lv: rng.normal(size=(8, 4)).astype(np.float32) for lv in "ab"}
    (root / "runs/sids").mkdir()
    save_file(books, root / "runs/sids/codebooks.safetensors")  # 8 codes per level, as the SIDs
    codes = rng.normal(size=(256, 32)).astype(np.float32)
    (root / "tiger").mkdir()
    save_file({"sid_embedding.weight": codes}, root / "tiger/model.safetensors")
    return root


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    return build_world(tmp_path_factory.mktemp("world"))


def environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "GEODIAG_"))}
    bin_dir = str(Path(sys.executable).parent)
    # offline: a block that reaches for the Hub fails here instead of downloading
    return {
        **env,
        "PATH": bin_dir + os.pathsep + env.get("PATH", ""),
        "HF_HOME": str(home / "hf-home"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "80",
    }


# ---- the tests ------------------------------------------------------------------------


def test_blocks_are_found_and_few_are_not_run():
    assert len(BLOCKS) >= 15, [b.id for b in BLOCKS]
    not_run = [b for b in BLOCKS if b.not_run]
    assert len(not_run) <= NOT_RUN_MAX, [b.id for b in not_run]
    assert all(len(b.not_run) > 20 for b in not_run)  # a reason, not a shrug


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.not_run], ids=lambda b: b.id)
def test_block_runs_as_written(block, world, tmp_path):
    here = tmp_path / "cwd"
    shutil.copytree(world, here)  # each block in its own copy: what one writes, no other sees
    env = environment(tmp_path)
    if block.language == "python":
        res = subprocess.run(
            [sys.executable, "-"],
            input=block.code,
            cwd=here,
            env=env,
            capture_output=True,
            text=True,
        )
        assert res.returncode == 0, f"{block.id}:\n{res.stdout}\n{res.stderr}"
        return
    for line in command_lines(block.code):
        res = subprocess.run(
            ["bash", "-c", line], cwd=here, env=env, capture_output=True, text=True
        )
        allowed = (0, 1) if line.startswith("geodiag check") else (0,)
        assert res.returncode in allowed, f"{block.id}: {line}\n{res.stdout}\n{res.stderr}"
        assert "Traceback" not in res.stderr, f"{block.id}: {line}\n{res.stderr}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.not_run], ids=lambda b: b.id)
def test_blocks_not_run_still_parse(block):
    """geodiag and gti lines of a block not run: the options exist and take the values."""
    import typer

    from geodiag.cli import app as geodiag_app
    from gti.cli import app as gti_app

    groups = {"geodiag": geodiag_app, "gti": gti_app}
    for line in command_lines(block.code):
        words = shlex.split(line)
        if words[0] not in groups:
            continue
        cmd = typer.main.get_command(groups[words[0]])
        rest = words[1:]
        while hasattr(cmd, "commands"):
            cmd, rest = cmd.commands[rest[0]], rest[1:]
        cmd.make_context(words[0], rest)  # click's UsageError names the option at fault


def test_readme_installs_every_extra_the_code_asks_for():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = set(pyproject["project"]["optional-dependencies"]) - USER_EXTRAS_ONLY_FOR_DEVELOPERS
    (install,) = [b for b in blocks(ROOT / "README.md") if "pip install geodiag" in b.code]
    listed = set(re.findall(r"geodiag\[(\w+)\]", install.code))
    assert listed == extras, f"README's install list: {sorted(listed)}; pyproject: {sorted(extras)}"
    asked = set()
    for path in [*ROOT.glob("geodiag/**/*.py"), *ROOT.glob("gti/**/*.py")]:
        asked |= set(re.findall(r"geodiag\[(\w+)\]", path.read_text(encoding="utf-8")))
    asked |= set(re.findall(r"geodiag\[(\w+)\]", (ROOT / "pyproject.toml").read_text()))
    assert asked - USER_EXTRAS_ONLY_FOR_DEVELOPERS <= listed, sorted(asked - listed)
