"""A checkpoint folder in an object store, ``s3://BUCKET/PREFIX`` or ``gs://BUCKET/PREFIX``,
read by byte ranges through fsspec's filesystems: s3fs (the ``s3`` extra) or gcsfs (the
``gs`` extra), each imported only when such a URL is read. One :class:`Backend` per scheme
(:data:`BACKENDS`) says which filesystem, which extra, how to ask an object's size and its
bytes, and what the store's errors mean; the rest (finding files, ranged reads, retries) is
one code path.

Credentials come from the usual places and are never shown:

- S3: the AWS chain (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
  ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``, the shared files, an instance role); the endpoint
  from ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (MinIO, R2, a test server).
- GCS: gcsfs's chain (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's application-default
  login, the metadata server on Google Cloud unless ``NO_GCE_CHECK=true``), and where none
  is found gcsfs reads anonymously, as a public bucket allows; the endpoint from
  ``STORAGE_EMULATOR_HOST`` (an emulator, a test server).

Files are found by asking for each known name (``HeadObject``; GCS's object metadata GET),
never by listing, so read permission alone is enough (``s3:GetObject``,
``storage.objects.get``). Without ``s3:ListBucket`` S3 answers a missing key with
AccessDenied, so a small file refused counts as absent, while the weights refused are an
error; the same rule holds for GCS.

Failures are those of ``geodiag.io.sources.byte_ranges``: timeouts, dropped connections and 5xx
answers retried here (:data:`~geodiag.io.sources.byte_ranges.RETRIES`, with backoff), the
filesystems' own retries turned off; a missing object or bucket, a refusal, missing
credentials or an endpoint that cannot be reached one :class:`InputError` naming the URL,
at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from geodiag.errors import InputError, require_extra
from geodiag.io.sources import byte_ranges


@dataclass(frozen=True)
class Backend:
    """What differs between object stores; everything else is shared."""

    scheme: str  # "s3://"
    service: str  # the store as named in errors
    extra: str  # the pip extra that installs the filesystem
    modules: tuple[str, ...]  # imported to read it (looked up before, for the install line)
    filesystem: Callable[[], Any]  # a filesystem that fails fast, credentials from the chain
    size: Callable[[Any, str, str], int]  # (fs, bucket, key) -> bytes: one metadata request
    get: Callable[[Any, str, str, int | None, int | None], bytes]  # (fs, bucket, key, start, end)
    # raise the InputError an exception means, or return the problem if worth a retry
    classify: Callable[[Exception, str, Any], str]

    @property
    def install(self) -> str:
        return f"pip install 'geodiag[{self.extra}]'"


@dataclass
class ObjectFolder:
    """``SCHEME://BUCKET/PREFIX``: the same questions as ``remote.RemoteFolder`` (does a
    file exist, its bytes, a ranged file), asked of the bucket."""

    where: str  # the URL as shown (no trailing slash)
    fs: Any = field(repr=False)  # the backend's filesystem
    backend: Backend = field(repr=False)

    def shown(self, name: str) -> str:
        return f"{self.where}/{name}"

    def key(self, name: str) -> tuple[str, str]:
        bucket, _, prefix = self.where[len(self.backend.scheme) :].partition("/")
        return bucket, f"{prefix}/{name}" if prefix else name

    def exists(self, name: str, required: bool = False) -> bool:
        """True if there, False on not found (and on a refusal unless ``required``: without
        list permission a missing key answers 403)."""
        try:
            self.size(name)
            return True
        except _NotFound:
            return False
        except _Refused:
            if required:
                raise
            return False

    def size(self, name: str) -> int:
        return self._call(lambda: self.backend.size(self.fs, *self.key(name)), self.shown(name))

    def fetch(self, name: str, start: int | None = None, end: int | None = None) -> bytes:
        """The object's bytes, or those of ``[start, end)``."""
        get = self.backend.get
        return self._call(lambda: get(self.fs, *self.key(name), start, end), self.shown(name))

    def file(self, name: str) -> ObjectFile:
        return ObjectFile(self, name)

    def child(self, name: str) -> ObjectFolder:
        return ObjectFolder(self.shown(name), self.fs, self.backend)

    def parent(self) -> ObjectFolder:
        return ObjectFolder(self.where.rsplit("/", 1)[0], self.fs, self.backend)

    def _call(self, fn: Callable[[], Any], where: str) -> Any:
        """``fn()``, retried with backoff on a timeout, a dropped connection or a 5xx answer;
        an InputError naming ``where`` on anything else that fails."""

        def once() -> Any:
            try:
                return fn()
            except InputError:
                raise
            except Exception as e:  # the filesystems wrap their errors in OSError kinds
                raise byte_ranges.Retry(self.backend.classify(e, where, self.fs)) from None

        return byte_ranges.with_retries(once, where)


class ObjectFile(byte_ranges.RangedFile):
    """One object read by ranges (one ranged GET each)."""

    def __init__(
        self, folder: ObjectFolder, name: str, say: Callable[[str], None] | None = None
    ) -> None:
        super().__init__(folder.shown(name), say)
        self.folder, self.name = folder, name

    def _stat_size(self) -> int:
        return self.folder.size(self.name)

    def _fetch(self, offset: int, nbytes: int) -> bytes:
        return self.folder.fetch(self.name, offset, offset + nbytes)


def backend_of(url: str) -> Backend | None:
    return next((b for scheme, b in BACKENDS.items() if url.startswith(scheme)), None)


def open_folder(url: str) -> ObjectFolder:
    """``SCHEME://BUCKET[/PREFIX]`` (no trailing slash) -> its folder, on a filesystem
    that fails fast."""
    backend = backend_of(url)
    if backend is None:
        raise InputError(url, f"not an object store URL: expected one of {', '.join(BACKENDS)}")
    if not url[len(backend.scheme) :].split("/", 1)[0]:
        raise InputError(
            url, f"not a {backend.service} URL: expected {backend.scheme}BUCKET/PREFIX"
        )
    needs = f"{'/'.join(backend.modules)} (reading {backend.scheme} URLs)"
    require_extra(url, needs, backend.modules, backend.install)
    return ObjectFolder(url, backend.filesystem(), backend)


class _NotFound(InputError):
    pass


class _Refused(InputError):
    pass


# S3 -------------------------------------------------------------------------------------

# The endpoint, first found wins (botocore's own names for it).
S3_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
S3_NOT_FOUND = {"404", "NoSuchKey", "NoSuchBucket", "NotFound"}
S3_REFUSED = {
    "403",
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AllAccessDisabled",
}


def _s3_filesystem() -> Any:
    """s3fs on the AWS chain's credentials, the endpoint from the environment, a connect
    timeout, and no retries of its own or botocore's."""
    import s3fs

    endpoint = next((os.environ[k] for k in S3_ENDPOINT_ENV if os.environ.get(k)), None)
    fs = s3fs.S3FileSystem(
        endpoint_url=endpoint,
        skip_instance_cache=True,
        config_kwargs={
            "connect_timeout": byte_ranges.CONNECT_TIMEOUT_S,
            "read_timeout": byte_ranges.CONNECT_TIMEOUT_S * 3,
            "retries": {"max_attempts": 1, "mode": "standard"},
        },
    )
    fs.retries = 1  # a class attribute, not an argument: one try per call
    return fs


def _s3_size(fs: Any, bucket: str, key: str) -> int:
    return int(fs.call_s3("head_object", Bucket=bucket, Key=key)["ContentLength"])


def _s3_get(fs: Any, bucket: str, key: str, start: int | None, end: int | None) -> bytes:
    return fs.cat_file(f"{bucket}/{key}", start=start, end=end)


def _s3_classify(e: Exception, where: str, fs: Any) -> str:
    from botocore import exceptions as boto

    cause = _s3_client_error(e)
    if cause is not None:
        err = cause.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = int(cause.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in S3_NOT_FOUND or status == 404:
            raise _NotFound(where, f"not found ({code or 'HTTP 404'})") from None
        if code in S3_REFUSED or status == 403:
            raise _Refused(
                where,
                f"refused ({code or 'HTTP 403'}): the credentials (AWS_ACCESS_KEY_ID, "
                "AWS_PROFILE, ...) may not read it, or it does not exist and they may not "
                "list the bucket",
            ) from None
        if status >= 500 or code in ("SlowDown", "InternalError", "ServiceUnavailable"):
            return f"{code or status}"
        raise InputError(where, f"S3 answered {code or status}: {err.get('Message', '')}") from None
    if isinstance(e, boto.NoCredentialsError):
        raise InputError(
            where,
            "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
            "AWS_PROFILE",
        ) from None
    if isinstance(e, (boto.EndpointConnectionError, boto.ConnectTimeoutError)):
        raise InputError(where, f"cannot connect to the S3 endpoint ({e})") from None
    return _os_error(e, where, (boto.BotoCoreError,))


def _s3_client_error(e: BaseException) -> Any:
    from botocore.exceptions import ClientError

    seen = 0
    while e is not None and seen < 5:
        if isinstance(e, ClientError):
            return e
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


def _os_error(e: Exception, where: str, retried: tuple[type[Exception], ...]) -> str:
    """What is left once a backend has read its own errors: fsspec's OSError kinds."""
    if isinstance(e, FileNotFoundError):
        raise _NotFound(where, "not found") from None
    if isinstance(e, PermissionError):
        raise _Refused(where, f"refused: {e}") from None
    if isinstance(e, (OSError, TimeoutError, *retried)):
        return f"{e.__class__.__name__}: {e}"
    raise InputError(where, f"cannot read ({e.__class__.__name__}: {e})") from None


# GCS ------------------------------------------------------------------------------------


def _gcs_filesystem() -> Any:
    """gcsfs's plain JSON-API filesystem (``gcsfs.core``: not the package's default, which
    first asks the storage-control API what kind of bucket it is), with connect and read
    timeouts; its own retries are skipped (:func:`_gcs_request`)."""
    import aiohttp
    from gcsfs.core import GCSFileSystem

    timeout = aiohttp.ClientTimeout(
        total=None,
        connect=byte_ranges.CONNECT_TIMEOUT_S,
        sock_read=byte_ranges.CONNECT_TIMEOUT_S * 3,
    )
    return GCSFileSystem(skip_instance_cache=True, requests_timeout=timeout)


def _gcs_request(fs: Any, path: str, *args: str, headers: dict[str, str] | None = None) -> Any:
    """One GET: gcsfs's ``_request`` less the retry decorator around it (up to 6 tries and
    32 s waits of its own, a dead endpoint included)."""
    from fsspec.asyn import sync

    once = type(fs)._request.__wrapped__
    return sync(fs.loop, once, fs, "GET", path, *args, headers=headers or {})


def _gcs_size(fs: Any, bucket: str, key: str) -> int:
    contents = _gcs_request(fs, "b/{}/o/{}", bucket, key)[3]
    return int(json.loads(contents)["size"])


def _gcs_get(fs: Any, bucket: str, key: str, start: int | None, end: int | None) -> bytes:
    ranged = start is not None and end is not None
    headers = {"Range": f"bytes={start}-{end - 1}"} if ranged else {}
    status, _, _, contents = _gcs_request(fs, fs.url(f"{bucket}/{key}"), headers=headers)
    if ranged and status != 206:
        raise InputError(
            f"gs://{bucket}/{key}",
            f"the server ignores byte ranges (answered {status} to a Range request)",
        )
    return contents


def _gcs_classify(e: Exception, where: str, fs: Any) -> str:
    import aiohttp
    import google.auth.exceptions
    import requests
    from gcsfs.retry import HttpError
    from gcsfs.retry import errs as retried  # gcsfs's own list: 408, 429, 500-504

    if isinstance(e, HttpError) and e.code in (401, 403):
        raise _Refused(where, f"refused (HTTP {e.code}): {_gcs_refused_hint(fs)}") from None
    if isinstance(e, OSError) and str(e).startswith("Forbidden"):  # gcsfs's 403
        raise _Refused(where, f"refused (HTTP 403): {_gcs_refused_hint(fs)}") from None
    if isinstance(e, HttpError):
        if e.code in retried:
            return f"HTTP {e.code}"
        raise InputError(where, f"GCS answered HTTP {e.code}: {e.message}") from None
    if isinstance(e, requests.exceptions.ProxyError):  # gcsfs's 502
        return "HTTP 502"
    if isinstance(e, aiohttp.ClientConnectorError):  # refused, or no such host: no use retrying
        raise InputError(where, f"cannot connect to the GCS endpoint ({e})") from None
    if isinstance(e, google.auth.exceptions.GoogleAuthError):
        raise InputError(
            where, f"the Google credentials could not be used ({e.__class__.__name__}: {e})"
        ) from None
    if isinstance(e, ValueError):  # gcsfs's 400
        raise InputError(where, f"GCS refused the request: {e}") from None
    return _os_error(e, where, (aiohttp.ClientError, TimeoutError))


def _gcs_refused_hint(fs: Any) -> str:
    if getattr(fs.credentials, "method", None) == "anon":
        return (
            "no Google credentials were found, so it was asked anonymously (only public "
            "buckets read): set GOOGLE_APPLICATION_CREDENTIALS or run `gcloud auth "
            "application-default login`"
        )
    return "the Google credentials found may not read it"


BACKENDS = {
    "s3://": Backend(
        "s3://", "S3", "s3", ("s3fs",), _s3_filesystem, _s3_size, _s3_get, _s3_classify
    ),
    "gs://": Backend(
        "gs://", "GCS", "gs", ("gcsfs",), _gcs_filesystem, _gcs_size, _gcs_get, _gcs_classify
    ),
}
SCHEMES = tuple(BACKENDS)
