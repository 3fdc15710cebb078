"""Every before the files carry (geodiag.io.vocabulary.references), on files the real libraries wrote.

- PEFT: what each save holds was checked on peft 0.21: ``save_pretrained`` of a
  PeftModel with ``modules_to_save`` (and so a Trainer checkpoint of one) stores the
  trained copy alone; ``model.state_dict()`` and accelerate's ``save_model`` store
  ``original_module.weight`` beside ``modules_to_save.default.weight``. The last is
  written here, after real optimizer steps on data that feeds some of the new tokens.
- transformers' Trainer: a run saving checkpoint-1 and checkpoint-2 on data that never
  holds some new tokens.
- gti: the init checkpoint named in the sidecar (``gti sft`` writes it: tests/gti/sft).

Untied heads throughout: with a tied head every row gets a gradient through the softmax,
so no row stays where it was.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from tiny_models import save, tiny_lm, word_tokenizer
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.sources.options import ReadOptions
from geodiag.io.vocabulary import sidecar

pytestmark = pytest.mark.filterwarnings("ignore")  # PEFT's and transformers' own advice

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

N_WORDS, N_NEW = 100, 10
V0 = N_WORDS + 1  # <unk>, then the words
NEW = list(range(V0, V0 + N_NEW))
USED, UNUSED = NEW[:6], NEW[6:]  # new tokens the data holds, and those it never does


def _model_and_tokenizer(seed: int = 0, n_new: int = N_NEW):
    """A tiny untied Llama over the word tokenizer, ``n_new`` tokens added and their rows
    drawn like the vocabulary's (so no finding but movement can tell them untrained)."""
    tok = word_tokenizer(N_WORDS)
    tok.add_tokens([f"<a_{i}>" for i in range(n_new)])
    model = tiny_lm(len(tok), tied=False, seed=seed)
    with torch.no_grad():
        for w in (model.get_input_embeddings().weight, model.lm_head.weight):
            g = torch.Generator().manual_seed(seed + 1)
            w[V0:] = torch.randn(w[V0:].shape, generator=g) * w[:V0].std()
    return model, tok


def _batch(i: int) -> torch.Tensor:
    """Words, then every USED new token (in a seeded order), never an UNUSED one."""
    g = torch.Generator().manual_seed(i)
    words = torch.randint(1, V0, (6,), generator=g)
    new = torch.tensor(USED)[torch.randperm(len(USED), generator=g)]
    return torch.cat([words, new])


def _untrained(path: Path, **read) -> tuple[dict, set[int]]:
    from geodiag.analysis.checkpoint import measure_checkpoint
    from geodiag.analysis.options import AnalyzeOptions

    ckpt = open_checkpoint(path, ReadOptions(**read))
    report = measure_checkpoint(ckpt, AnalyzeOptions())
    u = report.matrices[0].untrained
    return report, {t.id for t in u.tokens if "barely_moved" in t.findings}


# --- PEFT: original_module in a full state dict --------------------------------------


@pytest.fixture(scope="module")
def peft_state_dict(tmp_path_factory):
    """accelerate's save_model of a PeftModel (modules_to_save=["embed_tokens"]) after
    3 AdamW steps, with the tokenizer and config saved beside it as a user would."""
    peft = pytest.importorskip("peft")
    accelerate = pytest.importorskip("accelerate")
    model, tok = _model_and_tokenizer()
    pm = peft.get_peft_model(
        model, peft.LoraConfig(r=4, target_modules=["q_proj"], modules_to_save=["embed_tokens"])
    )
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=1e-2)
    for step in range(3):
        x = torch.stack([_batch(4 * step + k) for k in range(4)])
        pm(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()
    out = tmp_path_factory.mktemp("peft") / "full"
    accelerate.Accelerator(cpu=True).save_model(pm, out)
    tok.save_pretrained(out)
    model.config.save_pretrained(out)
    return out


def test_peft_full_state_dict_holds_the_original(peft_state_dict):
    from safetensors import safe_open

    with safe_open(peft_state_dict / "model.safetensors", "np") as f:
        names = set(f.keys())
    assert "base_model.model.model.embed_tokens.original_module.weight" in names
    assert "base_model.model.model.embed_tokens.modules_to_save.default.weight" in names


def test_peft_original_module_is_the_reference(peft_state_dict):
    ckpt = open_checkpoint(peft_state_dict)
    assert ckpt.matrices[0].tensor.endswith("embed_tokens.modules_to_save.default.weight")
    assert [m.tensor for m in ckpt.reference.matrices] == [
        "base_model.model.model.embed_tokens.original_module.weight"
    ]
    assert "original_module" in ckpt.reference_notes[-1]
    report, barely = _untrained(peft_state_dict)
    assert barely == set(UNUSED)
    assert any("original_module" in n and "--no-auto-reference" in n for n in report.notes)
    # Today's behaviour on request: no reference, nothing barely moved.
    report, barely = _untrained(peft_state_dict, auto_reference=False)
    assert (
        barely == set()
        and open_checkpoint(peft_state_dict, ReadOptions(auto_reference=False)).reference is None
    )


def test_peft_cli_flags_the_untrained_rows(peft_state_dict):
    res = CliRunner().invoke(app, ["metrics", str(peft_state_dict), "--json"])
    assert res.exit_code == 0, res.output
    m0 = json.loads(res.stdout)["matrices"][0]
    flagged = {t["id"] for t in m0["untrained"]["tokens"] if "barely_moved" in t["findings"]}
    assert flagged == set(UNUSED)
    res = CliRunner().invoke(app, ["check", str(peft_state_dict), "--no-auto-reference"])
    assert res.exit_code == 0, res.output


def test_explicit_reference_wins_and_a_bad_one_exits_2(peft_state_dict, tmp_path):
    ckpt = open_checkpoint(peft_state_dict, ReadOptions(reference=peft_state_dict))
    assert ckpt.reference.path == peft_state_dict
    assert ckpt.reference_notes == [f"reference: {peft_state_dict} (--reference)"]
    res = CliRunner().invoke(
        app, ["check", str(peft_state_dict), "--reference", str(tmp_path / "gone")]
    )
    assert res.exit_code == 2 and "--reference" in res.output


# --- transformers' Trainer: the earliest sibling checkpoint ---------------------------


class _Sequences(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        x = _batch(i)
        return {"input_ids": x, "labels": x}


@pytest.fixture(scope="module")
def trainer_run(tmp_path_factory):
    """A Trainer run saving checkpoint-1 and checkpoint-2 (the tokenizer beside each)."""
    model, tok = _model_and_tokenizer()
    out = tmp_path_factory.mktemp("trainer") / "run"
    args = transformers.TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=4,
        max_steps=2,
        save_steps=1,
        save_strategy="steps",
        learning_rate=1e-2,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    transformers.Trainer(
        model=model,
        args=args,
        train_dataset=_Sequences(),
        processing_class=tok,  # saved into each checkpoint: it names the new tokens
        data_collator=transformers.default_data_collator,  # equal lengths: no padding
    ).train()
    return out


def test_trainer_checkpoint_measured_from_its_earliest_sibling(trainer_run):
    assert sorted(p.name for p in trainer_run.iterdir()) == ["checkpoint-1", "checkpoint-2"]
    report, barely = _untrained(trainer_run / "checkpoint-2")
    assert barely == set(UNUSED)
    note = next(n for n in report.notes if n.startswith("reference:"))
    assert "checkpoint-1" in note and "after 1 steps, not the initialization" in note
    assert report.reference == str(trainer_run / "checkpoint-1")
    # The earliest has nothing before it; a file inside a checkpoint folder counts too.
    assert open_checkpoint(trainer_run / "checkpoint-1").reference is None
    inside = open_checkpoint(trainer_run / "checkpoint-2" / "model.safetensors")
    assert inside.reference.path == trainer_run / "checkpoint-1"


def test_a_sibling_with_other_new_tokens_is_a_note(trainer_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trainer_run / "checkpoint-2", run / "checkpoint-2")
    model, tok = _model_and_tokenizer(n_new=N_NEW - 2)
    save(model, run / "checkpoint-0", tok)  # another vocabulary, the earliest name
    ckpt = open_checkpoint(run / "checkpoint-2")
    assert ckpt.reference is None
    assert len(ckpt.reference_notes) == 1
    assert (
        "checkpoint-0" in ckpt.reference_notes[0] and "new tokens differ" in ckpt.reference_notes[0]
    )
    res = CliRunner().invoke(app, ["check", str(run / "checkpoint-2")])
    assert res.exit_code == 0, res.output


def test_drift_and_report_over_the_siblings(trainer_run, tmp_path):
    first, second = trainer_run / "checkpoint-1", trainer_run / "checkpoint-2"
    res = CliRunner().invoke(app, ["drift", str(first), str(second), "--json"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(first), str(second), "-o", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.with_suffix(".json").read_text())
    later = next(c for c in data["checkpoints"] if c["report"]["path"] == str(second))
    notes = [n for n in later["report"]["notes"] if n.startswith("reference:")]
    assert len(notes) == 1
    assert notes[0].startswith("reference: checkpoint-1, the run's earliest saved checkpoint")
    # the report pairs them because the files say so, and says why
    (pair,) = data["pairs"]
    assert (pair["before"], pair["after"]) == ("checkpoint-1", "checkpoint-2")
    assert pair["why"].startswith("checkpoint-1, the run's earliest saved checkpoint")


# --- the sidecar's init checkpoint ----------------------------------------------------


def _levels(sids_of: Path) -> sidecar.SemanticIds:
    return sidecar.SemanticIds(
        base_vocab_size=V0,
        levels=[sidecar.Level("a", N_NEW, NEW)],
        items={"i0": [0]},
        provenance={"stage": "sft"},
    )


def test_the_sidecars_init_comes_first(trainer_run, tmp_path):
    """gti sft names its init (relative to the checkpoint): it wins over a sibling."""
    run = tmp_path / "run"
    shutil.copytree(trainer_run, run)
    init = tmp_path / "init"
    model, tok = _model_and_tokenizer()  # the rows before training
    save(model, init, tok)
    sidecar.write_description(init, _levels(init), None)
    later = run / "checkpoint-2"
    sidecar.write_description(later, sidecar.with_init(_levels(later), init, later), None)
    assert sidecar.load(later).provenance["init_checkpoint"] == "../../init"
    ckpt = open_checkpoint(later)
    assert ckpt.reference.path == init
    assert "the init checkpoint semantic_ids.json names" in ckpt.reference_notes[-1]
    _, barely = _untrained(later)
    assert barely == set(UNUSED)
    # Moved away: a note, and the next source (the sibling) is used.
    shutil.rmtree(init)
    ckpt = open_checkpoint(later)
    assert "is not there" in ckpt.reference_notes[0]
    assert ckpt.reference.path == run / "checkpoint-1"


def test_two_adapters_copies_ask_for_tensor(tmp_path):
    """A full state dict of a PeftModel with two adapters holds one modules_to_save copy
    each: which one is the model is the user's to say (exit 2 naming both)."""
    peft = pytest.importorskip("peft")
    from safetensors.torch import save_file

    model, tok = _model_and_tokenizer()
    config = dict(r=4, target_modules=["q_proj"], modules_to_save=["embed_tokens"])
    pm = peft.get_peft_model(model, peft.LoraConfig(**config))
    pm.add_adapter("other", peft.LoraConfig(**config))
    state = {k: v.contiguous() for k, v in pm.state_dict().items()}
    assert {k for k in state if "embed_tokens.modules_to_save" in k} == {
        "base_model.model.model.embed_tokens.modules_to_save.default.weight",
        "base_model.model.model.embed_tokens.modules_to_save.other.weight",
    }
    folder = tmp_path / "two"
    folder.mkdir()
    save_file(state, folder / "model.safetensors")
    tok.save_pretrained(folder)
    res = CliRunner().invoke(app, ["metrics", str(folder)])
    assert res.exit_code == 2 and "several candidate embeddings" in res.output
    copy = "base_model.model.model.embed_tokens.modules_to_save.other.weight"
    ckpt = open_checkpoint(folder, ReadOptions(tensor=copy))
    assert ckpt.reference.matrices[0].tensor.endswith("embed_tokens.original_module.weight")


def test_a_grounded_init_measures_movement_but_flags_no_row(trainer_run, tmp_path):
    """A `gti init --strategy gti` checkpoint's rows were trained by grounding: rows that
    SFT left where grounding put them are trained, so none is flagged for barely moving
    since it (the note says so), while movement is still measured from it."""
    run = tmp_path / "run"
    shutil.copytree(trainer_run, run)
    init = tmp_path / "grounded"
    model, tok = _model_and_tokenizer()
    save(model, init, tok)
    # As gti writes a grounded init's provenance (its signature: geodiag.gate.signature).
    said = {"stage": "init", "init_strategy": "gti", "step": 40}
    said |= {"init_signature": "trained", "start_signature": "identical"}
    grounded = dataclasses.replace(_levels(init), provenance=said)
    sidecar.write_description(init, grounded, None)
    later = run / "checkpoint-2"
    sidecar.write_description(later, sidecar.with_init(_levels(later), init, later), None)
    ckpt = open_checkpoint(later)
    assert ckpt.reference.path == init
    assert (
        "a `gti init --strategy gti` checkpoint, whose new rows were trained (grounded)"
        in (ckpt.reference_notes[-1])
    )
    # Movement is measured from it; no row counts untrained for barely moving since.
    from geodiag.analysis.checkpoint import measure_checkpoint
    from geodiag.analysis.options import AnalyzeOptions

    u = measure_checkpoint(ckpt, AnalyzeOptions(n_permutations=0)).matrices[0].untrained
    assert u.movement_basis == "reference" and u.barely_moved is None
    # The same init, not grounded: the unused tokens barely moved since it.
    sidecar.write_description(init, _levels(init), None)
    _, barely = _untrained(later)
    assert barely == set(UNUSED)


def test_a_remote_checkpoints_init_is_named_from_its_url(trainer_run, tmp_path, monkeypatch):
    """Behind a URL the sidecar's relative init resolves against the URL, as against the
    folder: the same reference and the same barely-moved rows. Where it climbs out of what
    the URL reaches (an hf:// repository's root) it is a note, and --reference URL gives it."""
    from test_remote import Server

    site = tmp_path / "site"
    run, init = site / "run", site / "init"
    shutil.copytree(trainer_run, run)
    model, tok = _model_and_tokenizer()
    save(model, init, tok)
    sidecar.write_description(init, _levels(init), None)
    later = run / "checkpoint-2"
    sidecar.write_description(later, sidecar.with_init(_levels(later), init, later), None)
    servers = [Server(site, tmp_path / "site.jsonl")]
    try:
        url = f"{servers[0].url}/run/checkpoint-2"
        ckpt = open_checkpoint(url)
        assert ckpt.reference.location == f"{servers[0].url}/init"
        assert "the init checkpoint semantic_ids.json names" in ckpt.reference_notes[-1]
        assert _untrained(url)[1] == _untrained(later)[1] == set(UNUSED)

        hub = Server(later, tmp_path / "hub.jsonl", "--prefix", "/org/sft/resolve/main")
        servers.append(hub)
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        ckpt = open_checkpoint("hf://org/sft")
        assert ckpt.reference is None
        assert any(
            "../../init, is not reachable from hf://org/sft" in n for n in ckpt.reference_notes
        )
        ckpt = open_checkpoint("hf://org/sft", ReadOptions(reference=f"{servers[0].url}/init"))
        assert ckpt.reference.location == f"{servers[0].url}/init"
        assert _untrained("hf://org/sft", reference=f"{servers[0].url}/init")[1] == set(UNUSED)
    finally:
        for s in servers:
            s.stop()
