"""geodiag.io.sources.hub_auth: the token hf:// sends is the one huggingface_hub itself would send
(its get_token / build_hf_headers, run in a fresh process, is the reference), and what a
refusal means."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from geodiag.errors import InputError
from geodiag.io.sources import hub_auth

# Both answers in one fresh process: huggingface_hub reads its paths at import.
BOTH = """
import json
from huggingface_hub.utils import build_hf_headers
from geodiag.io.sources.hub_auth import find_token
ours = find_token()
sent = build_hf_headers().get("authorization")
print(json.dumps({
    "hub": sent[len("Bearer "):] if sent else None,
    "ours": ours.value if ours else None,
    "source": ours.source if ours else None,
}))
"""

HUB_ENV = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_TOKEN_PATH",
    "HF_HOME",
    "XDG_CACHE_HOME",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN",
    "HF_OIDC_RESOURCE",
)


def both(env: dict[str, str], home) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in HUB_ENV}
    clean["HOME"] = str(home)  # ~ of the default path: an empty folder unless set up
    out = subprocess.run(
        [sys.executable, "-c", BOTH],
        env={**clean, **env, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


@pytest.mark.parametrize(
    "case",
    [
        "none",
        "default file",
        "xdg file",
        "hf_home file",
        "token path",
        "env over file",
        "old env name",
        "empty env",
        "disabled",
    ],
)
def test_the_token_is_the_one_huggingface_hub_sends(tmp_path, case):
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    default = home / ".cache" / "huggingface" / "token"
    files = {
        "default file": (default, {}),
        "xdg file": (
            tmp_path / "xdg" / "huggingface" / "token",
            {"XDG_CACHE_HOME": str(tmp_path / "xdg")},
        ),
        "hf_home file": (tmp_path / "hfh" / "token", {"HF_HOME": str(tmp_path / "hfh")}),
        "token path": (tmp_path / "t.txt", {"HF_TOKEN_PATH": str(tmp_path / "t.txt")}),
        "env over file": (default, {"HF_TOKEN": "hf_env"}),
        "old env name": (default, {"HUGGING_FACE_HUB_TOKEN": "hf_old"}),
        "empty env": (default, {"HF_TOKEN": " \n"}),
        "disabled": (default, {"HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}),
    }
    env = {}
    if case in files:
        path, env = files[case]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f" hf_{case.replace(' ', '_')}\n")  # as written, edges stripped
    got = both(env, home)
    assert got["ours"] == got["hub"], got
    expected = {
        "none": None,
        "env over file": "hf_env",
        "old env name": "hf_old",
        "disabled": None,
    }.get(case, f"hf_{case.replace(' ', '_')}")
    if case == "empty env":
        expected = "hf_empty_env"  # an empty HF_TOKEN is none: the file's
    assert got["ours"] == expected
    if got["ours"]:
        assert got["ours"] not in got["source"]
    if case == "token path":
        assert got["source"] == f"{tmp_path / 't.txt'} (HF_TOKEN_PATH)"
    if case == "default file":
        assert got["source"] == f"{default} (`hf auth login`)"
    if case == "env over file":
        assert got["source"] == "HF_TOKEN"


def test_an_unreadable_token_file_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path))  # a folder: IsADirectoryError
    with pytest.raises(InputError, match="cannot read the Hub token"):
        hub_auth.find_token()


def test_refusals_say_which_case():
    token = hub_auth.HubToken("hf_x", "HF_TOKEN")
    page = "https://huggingface.co/org/name"
    gated = {"X-Error-Code": "GatedRepo"}
    why = hub_auth.explains_refusal(token, page)
    assert why(403, gated).startswith(
        f"a gated repository: accept the conditions on its page ({page})"
    )
    wrong = why(401, {"X-Error-Message": "Invalid credentials in Authorization header"})
    assert wrong.startswith("the Hub did not accept the token sent (from HF_TOKEN)")
    assert "fine-grained" in why(403, {})
    anonymous = hub_auth.explains_refusal(None, page)
    assert anonymous(401, gated).startswith("a gated repository: log in")
    assert anonymous(401, {"X-Error-Code": "RepoNotFound"}).startswith("private, gated or missing")
    assert all("hf_x" not in w for w in (why(403, gated), wrong, why(403, {})))
