"""A tiny HTTP server for the remote-reading tests: serves a folder with HEAD, GET and
single byte ranges (206 + Content-Range), which ``python -m http.server`` does not, and
logs every request (method, path, status, body bytes sent) as a JSON line.

    python range_server.py ROOT LOG [--prefix /org/name/resolve/main] [--token T] [--gated]
        [--fail-first N] [--rate MBIT]

Prints the port it listens on (an OS-chosen free one) as its first line of stdout.
``--prefix``: only paths under it are served (the Hub's resolve route); ``--token``: the
token that may read, refused as the Hub refuses (401 without a token, with ``X-Error-Code:
RepoNotFound``, or ``GatedRepo`` when ``--gated``; 401 ``Invalid credentials in Authorization
header`` for another token); ``--gated``: a gated repository whose conditions the token's
account has not accepted (403, ``X-Error-Code: GatedRepo``); ``--fail-first N``: the first N requests answer 500;
``--rate MBIT``: bodies leave at MBIT megabits per second, all connections together (one
shared link, for the benchmarks).

Each request is numbered as it arrives and logged twice: ``{"seq", "arrived"}`` before it
is answered, the full entry after. A request is logged after its client has its answer,
so a client's next request can finish first; :func:`read_log` returns the entries in the
order they arrived, once every arrived request has its entry (for a client that waits for
each answer, the order it sent them).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHUNK = 256 * 1024
LOG_WAIT_S = 30.0  # a safeguard against a dead server, not a timing the tests rely on


def read_log(log: Path) -> list[dict]:
    """The entries of every request that has arrived, in arrival order; waits (polling)
    until each arrived request has been logged in full."""
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        lines = [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
        arrived = {x["seq"] for x in lines if x.get("arrived")}
        done = sorted((x for x in lines if not x.get("arrived")), key=lambda x: x["seq"])
        if {x["seq"] for x in done} >= arrived:
            return done
        if time.monotonic() > deadline:
            raise AssertionError(f"{log}: requests {sorted(arrived)} never logged in full")
        time.sleep(0.01)


class Link:
    """A shared link of ``rate`` bytes per second (None: unlimited): each chunk waits for
    the link to finish what was queued before it."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.lock = threading.Lock()
        self.free_at = time.monotonic()

    def send(self, n: int) -> None:
        if self.rate is None:
            return
        with self.lock:
            now = time.monotonic()
            self.free_at = max(now, self.free_at) + n / self.rate
            done = self.free_at
        time.sleep(max(0.0, done - now))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=Path)
    ap.add_argument("log", type=Path)
    ap.add_argument("--prefix", default="")
    ap.add_argument("--token", default=None)
    ap.add_argument("--gated", action="store_true")
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--rate", type=float, default=None, help="megabits per second")
    args = ap.parse_args()
    lock = threading.Lock()
    state = {"failures_left": args.fail_first, "seq": 0}
    link = Link(None if args.rate is None else args.rate * 1e6 / 8)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _write(self, entry: dict) -> None:
            with lock, open(args.log, "a") as f:
                f.write(json.dumps(entry) + "\n")

        def _arrive(self) -> None:
            with lock:
                state["seq"] += 1
                self.seq = state["seq"]
            self._write({"seq": self.seq, "arrived": True})

        def _log(self, status: int, sent: int) -> None:
            entry = {
                "seq": self.seq,
                "method": self.command,
                "path": self.path,
                "range": self.headers.get("Range"),
                "status": status,
                "bytes": sent,
            }
            self._write(entry)

        def _refuse(self, status: int, code: str = "", message: str = "") -> None:
            self.send_response(status)
            if code:
                self.send_header("X-Error-Code", code)
            if message:
                self.send_header("X-Error-Message", message)
            self.send_header("Content-Length", "0")
            self.end_headers()
            self._log(status, 0)

        def _serve(self, body: bool) -> None:
            self._arrive()
            with lock:
                fail = state["failures_left"] > 0
                state["failures_left"] -= fail
            if fail:
                return self._refuse(500)
            if args.token is not None and self._hub_refuses():
                return None
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            if not path.startswith(args.prefix + "/"):
                return self._refuse(404)
            file = (args.root / path[len(args.prefix) + 1 :]).resolve()
            if args.root.resolve() not in file.parents or not file.is_file():
                return self._refuse(404)
            size = file.stat().st_size
            begin, end, status = 0, size - 1, 200
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
            if m:
                begin = int(m[1])
                end = min(int(m[2]) if m[2] else size - 1, size - 1)
                status = 206
            self.send_response(status)
            self.send_header("Content-Length", str(end - begin + 1))
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", f"bytes {begin}-{end}/{size}")
            self.end_headers()
            sent = 0
            if body:
                with open(file, "rb") as f:  # streamed: a whole-file GET may be gigabytes
                    f.seek(begin)
                    while sent < end - begin + 1:
                        data = f.read(min(CHUNK, end - begin + 1 - sent))
                        if not data:
                            break
                        link.send(len(data))
                        self.wfile.write(data)
                        sent += len(data)
            self._log(status, sent)

        def _hub_refuses(self) -> bool:
            """Refuse as the Hub does (huggingface_hub's hf_raise_for_status reads these
            headers); True when refused."""
            repo = args.prefix.split("/resolve/")[0].strip("/")
            sent = self.headers.get("Authorization")
            if sent is None and args.gated:
                self._refuse(
                    401,
                    "GatedRepo",
                    f"Access to model {repo} is restricted. You must have access to it and be "
                    "authenticated to access it. Please log in.",
                )
            elif sent is None:
                self._refuse(401, "RepoNotFound", "Repository not found")
            elif sent != f"Bearer {args.token}":
                self._refuse(401, message="Invalid credentials in Authorization header")
            elif args.gated:
                self._refuse(
                    403,
                    "GatedRepo",
                    f"Access to model {repo} is restricted and you are not in the authorized "
                    f"list. Visit https://huggingface.co/{repo} to ask for access.",
                )
            else:
                return False
            return True

        def do_GET(self) -> None:
            self._serve(body=True)

        def do_HEAD(self) -> None:
            self._serve(body=False)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
