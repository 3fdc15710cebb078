"""Byte ranges of one file, on disk or behind an HTTP(S) URL: what the safetensors, GGUF and
``torch.save`` archive (``geodiag.io.formats.torch_zip``: DCP chunks, ZeRO files) readers read
through (:class:`ByteSource`), so there is one reader for both; and a folder of such files
asked for by name (:class:`Folder`: :class:`LocalFolder` on disk,
``geodiag.io.sources.remote.RemoteFolder`` over HTTP, ``geodiag.io.sources.object_store.ObjectFolder``).

HTTP reads use the standard library alone (``urllib.request``, ``Range`` headers, HEAD for
the size): a CI gate installs nothing more to read a checkpoint where it lives. Nearby
spans are read with one request (:data:`COALESCE_GAP`): a run of consecutive rows costs one
round trip, not one per row. Timeouts, dropped connections and 5xx answers are retried
with backoff (:data:`RETRIES`); 401/403/404, a refused connection and an unknown host are
one :class:`InputError` naming the URL as shown (never its credentials), at once.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np

from geodiag.errors import InputError, cannot_read
from geodiag.io.sources.layouts import check_not_lfs_pointer
from geodiag.progress import AFTER_S as PROGRESS_AFTER_S
from geodiag.progress import READING_EVERY_S as PROGRESS_EVERY_S
from geodiag.progress import Progress

CONNECT_TIMEOUT_S = 10.0  # per request; an unreachable host fails in seconds, not minutes
RETRIES = 4  # tries per request on a timeout, a dropped connection or a 5xx answer
BACKOFF_S = 0.5  # wait before the second try, doubled for each try after it
# Spans closer than this are read with one request and the bytes between them dropped:
# a round trip costs more than 256 KB on any link a checkpoint is read over.
COALESCE_GAP = 256 * 1024
T = TypeVar("T")


class ByteSource(Protocol):
    """One file's bytes: its size, and the bytes of spans ``(offset, nbytes)``."""

    where: str  # the file or URL as shown in errors and digests

    def size(self) -> int: ...
    def read(self, spans: list[tuple[int, int]]) -> list[bytes]: ...


class Folder(Protocol):
    """Files asked for by name, never listed: whether one exists, a small one's bytes, a
    large one's byte ranges; ``where`` is the folder as shown."""

    where: str

    def shown(self, name: str) -> str: ...
    def exists(self, name: str) -> bool: ...
    def fetch(self, name: str) -> bytes: ...
    def file(self, name: str) -> ByteSource: ...


class LocalFolder:
    """A folder on disk as a :class:`Folder`."""

    def __init__(self, path: Path) -> None:
        self.path, self.where = path, str(path)

    def shown(self, name: str) -> str:
        return str(self.path / name)

    def exists(self, name: str) -> bool:
        return (self.path / name).is_file()

    def fetch(self, name: str) -> bytes:
        path = self.path / name
        check_not_lfs_pointer(path)
        try:
            return path.read_bytes()
        except OSError as e:
            raise cannot_read(path, e) from None

    def file(self, name: str) -> LocalFile:
        return LocalFile(self.path / name)


class LocalFile:
    def __init__(self, path: Path) -> None:
        self.path, self.where = path, str(path)

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            raise InputError(self.path, "file not found") from None
        except OSError as e:
            raise cannot_read(self.path, e) from None

    def read(self, spans: list[tuple[int, int]]) -> list[bytes]:
        try:
            f = open(self.path, "rb")
        except OSError as e:
            raise cannot_read(self.path, e) from None
        out = []
        with f:
            for offset, nbytes in spans:
                f.seek(offset)
                out.append(f.read(nbytes))
        return [_exact(self.where, data, span) for data, span in zip(out, spans, strict=True)]


def _exact(where: str, data: bytes, span: tuple[int, int]) -> bytes:
    if len(data) != span[1]:
        raise InputError(where, f"truncated while reading: wanted {span[1]} bytes at {span[0]}")
    return data


def read_rows(source: ByteSource, begin: int, row_bytes: int, rows: np.ndarray) -> np.ndarray:
    """(k, row_bytes) uint8: the stored bytes of rows ``rows`` (in the order asked, repeats
    allowed) of a table of fixed-size rows starting at byte ``begin``, one span per run of
    adjacent row ids (a remote source then coalesces nearby runs into one request)."""
    rows = np.asarray(rows, dtype=np.int64)
    out = np.empty((len(rows), row_bytes), dtype=np.uint8)
    if len(rows) == 0:
        return out
    order = np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    # Runs of consecutive (or repeated) row ids become one read each.
    breaks = np.flatnonzero(np.diff(sorted_rows) > 1) + 1
    runs = np.split(np.arange(len(rows)), breaks)
    firsts = [int(sorted_rows[run[0]]) for run in runs]
    lasts = [int(sorted_rows[run[-1]]) for run in runs]
    spans = [
        (begin + first * row_bytes, (last - first + 1) * row_bytes)
        for first, last in zip(firsts, lasts, strict=True)
    ]
    for run, first, last, data in zip(runs, firsts, lasts, source.read(spans), strict=True):
        block = np.frombuffer(data, dtype=np.uint8).reshape(last - first + 1, row_bytes)
        out[order[run]] = block[sorted_rows[run] - first]
    return out


def coalesce(spans: list[tuple[int, int]], gap: int = COALESCE_GAP) -> list[tuple[int, int]]:
    """Sorted ``(offset, nbytes)`` requests covering ``spans``, spans closer than ``gap``
    bytes sharing one."""
    merged: list[list[int]] = []
    for offset, nbytes in sorted(s for s in spans if s[1] > 0):
        if merged and offset <= merged[-1][1] + gap:
            merged[-1][1] = max(merged[-1][1], offset + nbytes)
        else:
            merged.append([offset, offset + nbytes])
    return [(begin, end - begin) for begin, end in merged]


class RangedFile:
    """A file read by ranged requests: nearby spans share one request (:func:`coalesce`),
    and a read that lasts says its progress. A subclass says how to ask for the size
    (:meth:`_stat_size`) and for one range (:meth:`_fetch`); ``where`` is the file as
    shown, never its credentials."""

    def __init__(self, where: str, say: Callable[[str], None] | None = None) -> None:
        self.where = where
        self._size: int | None = None
        self.bytes_read = 0
        self._progress_clock = Progress(PROGRESS_AFTER_S, PROGRESS_EVERY_S, say)

    def _stat_size(self) -> int:
        raise NotImplementedError

    def _fetch(self, offset: int, nbytes: int) -> bytes:
        raise NotImplementedError

    def size(self) -> int:
        if self._size is None:
            self._size = self._stat_size()
        return self._size

    def read(self, spans: list[tuple[int, int]]) -> list[bytes]:
        fetched = {begin: self._range(begin, nbytes) for begin, nbytes in coalesce(spans) if nbytes}
        starts = sorted(fetched)
        out = []
        for offset, nbytes in spans:
            if nbytes == 0:
                out.append(b"")
                continue
            begin = starts[bisect.bisect_right(starts, offset) - 1]
            data = fetched[begin][offset - begin : offset - begin + nbytes]
            out.append(_exact(self.where, data, (offset, nbytes)))
        return out

    def _range(self, offset: int, nbytes: int) -> bytes:
        data = self._fetch(offset, nbytes)[:nbytes]
        self.bytes_read += len(data)
        self._progress()
        return data

    def _progress(self) -> None:
        clock = self._progress_clock
        if not clock.due():
            return
        rate = self.bytes_read / max(clock.elapsed, 1e-9) / 1e6
        clock.say(
            f"reading {self.where}: {self.bytes_read / 1e6:.0f} MB of "
            f"{self.size() / 1e6:.0f} MB, {rate:.1f} MB/s"
        )


# Why a server refused (401, 403): from its status and its answer's headers, one phrase (the
# Hub's: geodiag.io.sources.hub_auth.explains_refusal); default: refused_hint.
Refusal = Callable[[int, Mapping[str, str]], str]


class HttpFile(RangedFile):
    """A file behind an HTTP(S) URL, read by ranges. ``headers`` (a token) go with every
    request and nowhere else; ``where`` is the URL as shown; ``refusal`` explains a 401 or
    403."""

    def __init__(
        self,
        url: str,
        where: str,
        headers: dict[str, str] | None = None,
        say: Callable[[str], None] | None = None,
        refusal: Refusal | None = None,
    ) -> None:
        super().__init__(where, say)
        self.url, self.headers, self.refusal = url, dict(headers or {}), refusal

    def _stat_size(self) -> int:
        _, length, _ = request(self.url, self.where, self.headers, "HEAD", self.refusal)
        if length is None:
            raise InputError(self.where, "the server gives no Content-Length for the file")
        return length

    def _fetch(self, offset: int, nbytes: int) -> bytes:
        headers = {**self.headers, "Range": f"bytes={offset}-{offset + nbytes - 1}"}
        return request(self.url, self.where, headers, refusal=self.refusal)[2]


def fetch_whole(
    url: str, where: str, headers: dict[str, str], refusal: Refusal | None = None
) -> bytes:
    """A small file's bytes, in one GET."""
    return request(url, where, headers, refusal=refusal)[2]


def exists(url: str, where: str, headers: dict[str, str], refusal: Refusal | None = None) -> bool:
    """HEAD ``url``: True on 2xx, False on 404; any other failure raises as
    :func:`request` does."""
    try:
        request(url, where, headers, "HEAD", refusal)
        return True
    except _NotFound:
        return False


class _NotFound(InputError):
    pass


def request(
    url: str,
    where: str,
    headers: dict[str, str],
    method: str = "GET",
    refusal: Refusal | None = None,
) -> tuple[int, int | None, bytes]:
    """(status, Content-Length, body) of ``method url``; retried with backoff on a timeout,
    a dropped connection (before or during the body) or a 5xx answer; an InputError naming
    ``where`` on anything else that fails (a 401 or 403 explained by ``refusal``).
    ``Authorization`` is not sent on to a host a redirect leads to (the Hub's resolve route
    redirects to a signed CDN URL)."""
    import socket  # the HTTP stack only when a URL is read: not on a local gate's path
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        url, headers={k: v for k, v in headers.items() if k != "Authorization"}, method=method
    )
    if "Authorization" in headers:
        req.add_unredirected_header("Authorization", headers["Authorization"])

    def once() -> tuple[int, int | None, bytes]:
        try:
            with urllib.request.urlopen(req, timeout=CONNECT_TIMEOUT_S) as r:
                length = r.headers.get("Content-Length")
                size = int(length) if length and length.isdigit() else None
                if "Range" in headers and r.status != 206:
                    raise InputError(
                        where,
                        f"the server ignores byte ranges (answered {r.status} to a Range "
                        "request): geodiag reads remote weights by ranges; download the "
                        "folder instead",
                    )
                return r.status, size, r.read() if method == "GET" else b""
        except urllib.error.HTTPError as e:
            e.close()
            if e.code == 404:
                raise _NotFound(where, "not found on the server (HTTP 404)") from None
            if e.code in (401, 403):
                why = (refusal or refused_hint(headers))(e.code, e.headers)
                raise InputError(where, f"refused (HTTP {e.code}): {why}") from None
            if e.code < 500:
                raise InputError(where, f"the server answered HTTP {e.code} ({e.reason})") from None
            raise Retry(f"HTTP {e.code} ({e.reason})") from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, (ConnectionRefusedError, socket.gaierror)):  # no use retrying
                raise InputError(where, f"cannot connect ({e.reason})") from None
            raise Retry(f"{e.reason}") from None
        except (OSError, http_client_errors()) as e:  # a timeout, a reset, a short body
            raise Retry(f"{e.__class__.__name__}: {e}") from None

    return with_retries(once, where)


class Retry(Exception):
    """A failure worth another try (a timeout, a dropped connection, a 5xx answer); its
    text says what failed."""


def with_retries(attempt: Callable[[], T], where: str) -> T:
    """``attempt()``, tried up to :data:`RETRIES` times with backoff while it raises
    :class:`Retry` (HTTP here, the object stores in ``geodiag.io.sources.object_store``); then an
    InputError naming ``where`` and the last problem."""
    problem = ""
    for n in range(RETRIES):
        if n:
            time.sleep(BACKOFF_S * 2 ** (n - 1))
        try:
            return attempt()
        except Retry as e:
            problem = str(e)
    raise InputError(where, f"gave up after {RETRIES} tries: {problem}")


def http_client_errors() -> type[Exception]:
    import http.client

    return http.client.HTTPException  # IncompleteRead, RemoteDisconnected's base among them


def refused_hint(headers: dict[str, str]) -> Refusal:
    """Why a plain HTTP(S) server refused, whatever it answered."""
    said = (
        "the credentials sent may not read it"
        if "Authorization" in headers
        else "it needs credentials (for the Hub, hf://ORG/NAME sends the token of `hf auth "
        "login` or HF_TOKEN)"
    )
    return lambda status, answer: said
