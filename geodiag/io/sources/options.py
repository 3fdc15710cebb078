"""The reading options of every command: which tensor, which rows are new, where the
levels and codebooks come from (one definition, turned into flags by ``geodiag.settings``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geodiag.errors import InputError
from geodiag.settings import INPUTS, REFERENCE, setting

DEFAULT_LEVEL_PATTERN = r"^<(?P<level>[A-Za-z]+)_(?P<code>\d+)>$"


@dataclass(frozen=True)
class ReadOptions:
    """How to find the new rows; every field is a CLI flag of the same name (the one
    definition of the reading options of every command: ``geodiag.settings``)."""

    HELP_PANEL = INPUTS  # their group in --help; what decides which untrained rows count: REFERENCE

    tensor: str | None = setting(
        None, help="Embedding tensor name (default: detected).", flags=("--tensor",), metavar="NAME"
    )
    sidecar: Path | None = setting(
        None,
        help="The semantic_ids.json sidecar (default: the one beside the weights).",
        flags=("--sidecar",),
        metavar="FILE",
    )
    new_tokens: tuple[int, int] | None = setting(  # [start, end)
        None,
        help="New rows as START:END (END exclusive).",
        flags=("--new-tokens",),
        metavar="START:END",
        cli_type=str | None,
        parse=lambda text: parse_range(text),
    )
    base_vocab_size: int | None = setting(
        None, help="Rows >= N are new.", flags=("--base-vocab-size",), metavar="N"
    )
    level_pattern: str = setting(
        DEFAULT_LEVEL_PATTERN,
        help="Regex that splits a new token into its level and code, with (?P<level>...) "
        "and (?P<code>...) groups.",
        flags=("--level-pattern",),
        metavar="REGEX",
    )
    codebooks: Path | None = setting(
        None,
        help="RQ-VAE codebooks: .safetensors (one tensor per level), or as a framework "
        "writes them (LC-Rec .pth, MiniOneRec .npz, OpenOneRec model.pt, GRID .ckpt, "
        "RQ-VAE-Recommender .pt; docs/stacks.md). Default: beside the weights.",
        flags=("--codebooks",),
        metavar="FILE",
    )
    sids: Path | None = setting(
        None,
        help="A framework's item -> SID map (LC-Rec/MiniOneRec *.index.json, ETEGRec "
        "*.code.json, GRID merged_predictions_tensor.pt, MiniOneRec codes .npy, OpenOneRec or "
        "semantic-ids-llm .parquet), recognised by content, in place of semantic_ids.json "
        "(default: beside the weights, under the framework's usual names).",
        flags=("--sids",),
    )
    sid_offset: int | None = setting(
        None,
        help="What --sids' codes start from (0, or 1 as MiniOneRec's *_plus indices write "
        "them) against 0-based codebooks (default: detected, refused when the data cannot tell).",
        flags=("--sid-offset",),
        ge=0,
        le=1,
        show_bounds=True,
    )
    allow_nonfinite: bool = setting(
        False, help="Drop NaN/Inf rows instead of failing.", flags=("--allow-nonfinite",)
    )
    base: Path | str | None = setting(  # a URL stays a str: Path() would drop a slash
        None,
        help="The base model (folder or URL): the new tokens are those its tokenizer lacks. "
        "For a PEFT adapter, the model it is read over (default: its base_model_name_or_path, "
        "when a folder or a URL).",
        flags=("--base",),
        metavar="MODEL",
        cli_type=str | None,
        parse=lambda text: parse_location(text),
    )
    reference: Path | str | None = setting(  # a URL stays a str, as --base
        None,
        help="An earlier checkpoint with the same new tokens (e.g. the run's init), a folder "
        "or a URL: new rows that barely moved since it count as untrained.",
        flags=("--reference",),
        metavar="CKPT",
        panel=REFERENCE,
        cli_type=str | None,
        parse=lambda text: parse_location(text),
    )
    data: tuple[Path, ...] = setting(
        (),
        help="Training or evaluation data (JSON lines or plain text; repeatable), tokenized "
        "with the checkpoint's tokenizer.json: an untrained token it feeds fails the gate, one "
        "nothing feeds warns. Needs geodiag[usage].",
        flags=("--data",),
        metavar="FILE",
        panel=REFERENCE,
        cli_type=list[Path] | None,
        cli_default=None,
        parse=lambda paths: tuple(paths or ()),
    )
    chat_template: Path | None = setting(
        None,
        help="A chat template (.jinja) whose tokens count as used, instead of the "
        "checkpoint's own (tokenizer_config.json, chat_template.jinja).",
        flags=("--chat-template",),
        metavar="FILE",
        panel=REFERENCE,
    )
    auto_reference: bool = setting(
        True,
        help="Without --reference, measure movement from the first earlier checkpoint the "
        "files name: the sidecar's init, PEFT's original_module, the run's first checkpoint-N.",
        flags=("--auto-reference/--no-auto-reference",),
        panel=REFERENCE,
    )
    full_vocabulary: bool = setting(
        False,
        help="For a remote checkpoint (a URL), read every original row for the vocabulary's "
        "figures, not a seeded sample of row blocks (whose error the report states).",
        flags=("--full-vocabulary",),
    )
    all_rows_new: bool = setting(
        False,
        help="Every row of the tensor is a new token (a separate table, e.g. TIGER's codes).",
        flags=("--all-rows-new",),
    )


def parse_location(text: str | None) -> Path | str | None:
    """A path, or a URL kept as given (``geodiag.io.sources.remote.SCHEMES``)."""
    from geodiag.io.sources.remote import is_remote

    if text is None or isinstance(text, Path) or is_remote(text):
        return text
    return Path(text)


def parse_range(text: str | None) -> tuple[int, int] | None:
    """``START:END`` -> (start, end), as ``--new-tokens`` takes it."""
    if text is None:
        return None
    try:
        start, end = (int(x) for x in text.split(":"))
    except ValueError:
        raise InputError("--new-tokens", f"expected START:END (integers), got {text!r}") from None
    return start, end


def parse_ids(text: str | None, flag: str) -> list[int] | None:
    """``ID,ID,START:END,...`` -> the ids ascending, each once (END exclusive, as
    ``--new-tokens``); an InputError naming ``flag`` for anything else."""
    if text is None:
        return None
    ids: set[int] = set()
    for part in text.split(","):
        try:
            if ":" in part:
                start, end = (int(x) for x in part.split(":"))
                ids.update(range(start, end))
            else:
                ids.add(int(part))
        except ValueError:
            raise InputError(
                flag, f"expected ids and START:END ranges, comma-separated; got {text!r}"
            ) from None
    if not ids or min(ids) < 0:
        raise InputError(flag, f"expected non-negative ids, at least one; got {text!r}")
    return sorted(ids)
