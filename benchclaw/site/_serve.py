"""``serve_site``: preview a built site on 127.0.0.1 with the standard library's server.

A preview only: loopback address, read-only (GET/HEAD of files under the site folder),
no directory listings. The site itself needs no server; it works opened from disk.
"""

from __future__ import annotations

import functools
import http.server
from pathlib import Path

from ..errors import InputError

__all__ = ["serve_site", "make_server"]


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".txt": "text/plain; charset=utf-8", ".html": "text/html; charset=utf-8",
                      ".svg": "image/svg+xml", ".css": "text/css; charset=utf-8"}

    def list_directory(self, path):  # no listings: the site links every page it has
        self.send_error(404, "no directory listing")
        return None

    def end_headers(self):
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, format, *args):  # quiet: the CLI prints the address once
        pass


def make_server(site_dir: Path | str, port: int = 8000) -> http.server.ThreadingHTTPServer:
    """A server bound to 127.0.0.1:``port`` (0 = any free port). Raises InputError when
    ``site_dir`` has no index.html, OSError when the port is taken."""
    root = Path(site_dir)
    if not (root / "index.html").is_file():
        raise InputError(f"{root}: no index.html (build the site first: benchclaw build)")
    handler = functools.partial(_Handler, directory=str(root))
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)


def serve_site(site_dir: Path | str, port: int = 8000) -> None:
    """Serve until interrupted. Raises InputError (no site) or OSError (port taken)."""
    server = make_server(site_dir, port)
    try:
        server.serve_forever()
    finally:
        server.server_close()
