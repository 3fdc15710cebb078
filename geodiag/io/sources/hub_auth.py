"""The Hub's token for ``hf://``, found where huggingface_hub finds it, and what a refusal
means: a gated repository whose conditions the account has not accepted (403, ``X-Error-Code:
GatedRepo``), a token the Hub does not take (401), or no token at all.

The order is huggingface_hub's own (``huggingface_hub.utils._auth.get_token`` and
``constants``, 2.4): ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` set sends none; else ``HF_TOKEN``, then
``HUGGING_FACE_HUB_TOKEN``, then the file ``hf auth login`` writes: ``HF_TOKEN_PATH``, by
default ``$HF_HOME/token`` (``HF_HOME`` by default ``${XDG_CACHE_HOME:-~/.cache}/huggingface``).
Not read: an OIDC exchange (``HF_OIDC_RESOURCE``, a network call) and Colab's secrets. Read
without importing huggingface_hub, which the gate's light install does not have.

The token is never shown; :attr:`HubToken.source` says where it came from.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from geodiag.errors import InputError

TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's ENV_VARS_TRUE_VALUES
ENV_TOKENS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # in huggingface_hub's order
LOGIN = "hf auth login"
REMEDY = f"log in with `{LOGIN}` or set HF_TOKEN"


@dataclass(frozen=True)
class HubToken:
    value: str = field(repr=False)
    source: str  # where it was found, as the output says it: never the token


def token_file() -> Path:
    """Where ``hf auth login`` keeps the token, as huggingface_hub resolves it."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    home = os.environ.get("HF_HOME") or os.path.join(cache, "huggingface")
    home = os.path.expandvars(os.path.expanduser(home))
    path = os.environ.get("HF_TOKEN_PATH") or os.path.join(home, "token")
    return Path(os.path.expandvars(os.path.expanduser(path)))


def _clean(token: str | None) -> str | None:
    """As huggingface_hub cleans it: no newlines, no edge spaces; empty is none."""
    if token is None:
        return None
    return token.replace("\r", "").replace("\n", "").strip() or None


def find_token() -> HubToken | None:
    """The token huggingface_hub would send, and where it was found; None: none to send."""
    if (os.environ.get("HF_HUB_DISABLE_IMPLICIT_TOKEN") or "").upper() in TRUE:
        return None
    for name in ENV_TOKENS:
        token = _clean(os.environ.get(name))
        if token:
            return HubToken(token, name)
    path = token_file()
    try:
        token = _clean(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:  # huggingface_hub fails too; here, one line naming the file
        raise InputError(path, f"cannot read the Hub token ({e.strerror}): {REMEDY}") from None
    if token is None:
        return None
    how = "HF_TOKEN_PATH" if os.environ.get("HF_TOKEN_PATH") else f"`{LOGIN}`"
    return HubToken(token, f"{path} ({how})")


def explains_refusal(token: HubToken | None, page: str) -> Callable[[int, Mapping[str, str]], str]:
    """What a 401 or 403 from the Hub means, from its status and ``X-Error-Code``, for
    a request sent with ``token`` (None: none) to the repository whose page is ``page``."""

    def why(status: int, answer: Mapping[str, str]) -> str:
        gated = answer.get("X-Error-Code") == "GatedRepo"
        if gated and token is not None and status == 403:
            return (
                f"a gated repository: accept the conditions on its page ({page}) with the "
                f"account of the token sent (from {token.source}), then run again"
            )
        if gated:
            return (
                f"a gated repository: log in (`{LOGIN}`, or HF_TOKEN) with an account that "
                f"accepted the conditions on its page ({page})"
            )
        if token is None:
            return (
                f"private, gated or missing, and no token was found: {REMEDY}, or check the "
                f"name on {page}"
            )
        if status == 401:
            return (
                f"the Hub did not accept the token sent (from {token.source}): it is wrong "
                f"or expired; {REMEDY}"
            )
        return (
            f"the token sent (from {token.source}) may not read it (a fine-grained token "
            f"without this repository?); see {page}"
        )

    return why
