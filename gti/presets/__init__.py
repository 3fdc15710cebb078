"""The shipped presets: ``gti/presets/<name>.toml``, package data read by this one loader.

A preset is a whole ``gti experiment`` or ``gti study`` TOML (``gti presets ls`` lists
them, ``gti presets cp NAME DEST`` copies one to edit, as torchtune's ``tune ls`` /
``tune cp``). Every entry point resolves a setting by one rule, :data:`RULE`; how a
file and ``gti init`` name their preset: :data:`HOW`.

Import-light (tomllib only): ``gti --help`` lists the presets without torch.
"""

from __future__ import annotations

import os
import re
import tomllib
from importlib import resources
from pathlib import Path

from geodiag.errors import InputError

PRESET_KEY = "preset"
RULE = "dataclass defaults < preset < TOML < command-line flags"
HOW = (
    f"A TOML names its preset with a top-level `{PRESET_KEY} = NAME`: every key it sets goes "
    "over the preset's, table by table (a list or value replaces the preset's whole). A "
    f"section may name the preset of that section alone (`{PRESET_KEY} = NAME` in the "
    "grounding table: preset NAME's grounding table, then the section's own keys); `gti "
    "init --preset NAME` takes that same grounding table. A key nobody sets is the "
    "dataclass default (the paper's setting)."
)


def _folder():
    return resources.files(__name__)


def preset_names() -> tuple[str, ...]:
    """Names of the shipped presets, sorted."""
    return tuple(sorted(p.name[:-5] for p in _folder().iterdir() if p.name.endswith(".toml")))


def preset_text(name: str, *, flag: str = "--preset") -> str:
    """The TOML text of preset ``name`` (comments included); ``flag`` names the option at
    fault when it is not one."""
    if name not in preset_names():
        raise InputError(flag, f"unknown preset {name!r}; choose from {', '.join(preset_names())}")
    return (_folder() / f"{name}.toml").read_text(encoding="utf-8")


def read_preset(name: str, *, flag: str = "--preset") -> dict:
    """Preset ``name`` as a table, its own ``preset`` keys resolved."""
    return _read(name, flag, ())


def _read(name: str, flag: str, seen: tuple[str, ...]) -> dict:
    text = preset_text(name, flag=flag)
    return resolve(tomllib.loads(text), f"gti/presets/{name}.toml", (*seen, name))


def grounding_preset(name: str, *, flag: str = "--preset") -> dict[str, object]:
    """The ``[grounding]`` table of preset ``name`` (what ``gti init --preset`` applies)."""
    return dict(read_preset(name, flag=flag).get("grounding", {}))


def summary(name: str) -> str:
    """What preset ``name`` is for: the first sentence of its opening comment, whole."""
    said = []
    for line in preset_text(name).splitlines():
        text = line.lstrip("#").strip()
        if not line.startswith("#") or not text:
            break
        said.append(text)
    paragraph = " ".join(said)
    end = re.search(r"\.(\s+[A-Z`]|$)", paragraph)  # "e.g. x", "2604.02324" go on
    return paragraph[: end.start() + 1] if end else paragraph


def resolve(data: dict, where: str, seen: tuple[str, ...] = ()) -> dict:
    """``data`` with its top-level and per-section ``preset`` keys replaced by the
    presets' values, ``data``'s own keys winning (the rule in this module's docstring).
    A section that names a preset is that preset's section plus its own keys, whatever
    the top-level preset's section holds."""
    data = dict(data)
    name = data.pop(PRESET_KEY, None)
    sections = {}
    for section, table in data.items():
        if isinstance(table, dict) and PRESET_KEY in table:
            own = {k: v for k, v in table.items() if k != PRESET_KEY}
            base = _read(_name(table[PRESET_KEY], where, seen, section), where, seen)
            sections[section] = merge(base.get(section, {}), own)
    if name is not None:
        data = merge(_read(_name(name, where, seen, None), where, seen), data)
    return {**data, **sections}


def _name(value: object, where: str, seen: tuple[str, ...], section: str | None) -> str:
    key = PRESET_KEY if section is None else f"[{section}] {PRESET_KEY}"
    if not isinstance(value, str) or value not in preset_names():
        raise InputError(
            where, f"{key} = {value!r} is not a preset; choose from {', '.join(preset_names())}"
        )
    if value in seen:
        raise InputError(where, f"{key} = {value!r} names a preset that names it back")
    return value


def merge(base: dict, over: dict) -> dict:
    """``over`` on top of ``base``, recursively for tables; any other value replaces."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def copy_preset(name: str, dest: Path) -> Path:
    """Write preset ``name`` to ``dest`` (a file, or a folder to put ``<name>.toml`` in);
    refuses to replace an existing file."""
    text = preset_text(name, flag="NAME")
    dest = Path(dest)
    if dest.is_dir():
        dest = dest / f"{name}.toml"
    if dest.exists():
        raise InputError(dest, "exists; choose another destination or delete it first")
    if not dest.parent.is_dir():
        raise InputError(dest, f"folder {dest.parent} does not exist")
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, dest)
    return dest
