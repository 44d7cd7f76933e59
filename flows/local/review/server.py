"""``ui``: the runs directory served on 127.0.0.1 (port 2746 by default, as ``argo
server``), read-only: ``/`` the run list, ``/runs/<name>/`` a run's page rendered from its
state.json at each request (a run written before pages existed has one too), and the
files of a run directory (its logs, its artifacts) as they are. GET and HEAD only; any
other method is answered 405, and nothing under the directory is ever written."""

from __future__ import annotations

import mimetypes
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from flows.local.review.listing import workflows
from flows.local.review.page import PAGE, POLICY, list_data, render, run_page
from flows.local.review.runs import STATE, RunNotFound

DEFAULT_PORT = 2746  # argo server's
TEXT = {".log", ".md", ".txt", ".json", ".yaml", ".yml", ".csv"}


class ReviewHandler(BaseHTTPRequestHandler):
    """Answers from ``server.runs_dir``; changes nothing."""

    server_version = "cifar-review"

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def __getattr__(self, name: str) -> Any:
        """Every other method (``do_POST``, ``do_PUT``, ``do_DELETE``, ..., any name a
        client sends): 405 with the methods allowed."""
        if name.startswith("do_"):
            return self._refuse
        raise AttributeError(name)

    def _refuse(self) -> None:
        self.close_connection = True  # its body, if any, is never read
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Connection", "close")
        self._finish(b"read-only: GET and HEAD only\n", "text/plain; charset=utf-8", True)

    def _answer(self, body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        try:
            found = self._find(path)
        except RunNotFound as exc:
            self.send_response(HTTPStatus.NOT_FOUND)
            self._finish(f"{exc}\n".encode(), "text/plain; charset=utf-8", body)
            return
        if isinstance(found, str):  # a redirect to the address with its slash
            self.send_response(HTTPStatus.MOVED_PERMANENTLY)
            self.send_header("Location", found)
            self._finish(b"", "text/plain", body)
            return
        content, kind = found
        self.send_response(HTTPStatus.OK)
        self._finish(content, kind, body)

    def _find(self, path: str) -> tuple[bytes, str] | str:
        """What ``path`` names: a page (HTML), a file of a run, or a redirect."""
        runs_dir: Path = self.server.runs_dir  # type: ignore[attr-defined]  # ReviewServer's
        if path in ("/", "/runs", "/runs/"):
            data = list_data(workflows(runs_dir), base="/runs/")
            return render(data, "local runs").encode(), "text/html; charset=utf-8"
        parts = [p for p in path.split("/") if p]
        if parts[0] != "runs" or any(p in (".", "..") for p in parts):
            raise RunNotFound(f"no such page: {path}")
        run_dir = runs_dir / parts[1]
        if not (run_dir / STATE).is_file():
            raise RunNotFound(f"no run {parts[1]!r} in {runs_dir}/")
        if len(parts) == 2 and not path.endswith("/"):
            return path + "/"
        if len(parts) == 2 or parts[2:] == [PAGE]:
            return run_page(run_dir).encode(), "text/html; charset=utf-8"
        target = run_dir.joinpath(*parts[2:]).resolve()
        if not target.is_relative_to(runs_dir.resolve()) or not target.is_file():
            raise RunNotFound(f"no such file in run {parts[1]}: {'/'.join(parts[2:])}")
        kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if target.suffix in TEXT or kind.startswith("text/"):
            kind = "text/plain; charset=utf-8"
        return target.read_bytes(), kind

    def _finish(self, content: bytes, kind: str, body: bool) -> None:
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(content)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", POLICY)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if body:
            self.wfile.write(content)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a page that follows a run asks every 2 s."""


class ReviewServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, runs_dir: Path, port: int = DEFAULT_PORT, host: str = "127.0.0.1"):
        self.runs_dir = Path(runs_dir)
        super().__init__((host, port), ReviewHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


def serve_in_background(runs_dir: Path, port: int = 0) -> tuple[ReviewServer, threading.Thread]:
    """A server on a thread (port 0: any free one), for tests and scripts."""
    server = ReviewServer(runs_dir, port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread
