"""The content digest of a task version, computable from bytes alone.

The verifier recomputes a task's digest from the files inside a bundle (without
extracting them), so this module is pure standard library and takes a plain mapping of
relative path to bytes. The canonical listing is one line per file, sorted by the UTF-8
bytes of the path: ``sha256:<hex of the file's bytes>`` two spaces, the path, ``\\n``.
The task digest is ``sha256:`` + the SHA-256 of that listing. Any change to any byte,
any rename, addition or removal of a file changes it.
"""

from __future__ import annotations

import hashlib
from typing import Mapping

__all__ = ["task_digest", "task_listing", "blob_digest"]


def blob_digest(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def task_listing(files: Mapping[str, bytes]) -> bytes:
    """The canonical listing of ``files``; raises ValueError on a path that cannot be
    listed unambiguously (empty, absolute, backslash, newline, '.' or '..' parts)."""
    lines = []
    for path in sorted(files, key=lambda p: p.encode("utf-8", "surrogatepass")):
        parts = path.split("/")
        if not path or path.startswith("/") or "\\" in path or "\n" in path or \
                any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"path {path!r} is not a clean relative path")
        lines.append(f"{blob_digest(files[path])}  {path}\n")
    return "".join(lines).encode("utf-8")


def task_digest(files: Mapping[str, bytes]) -> str:
    """``sha256:<hex>`` of the canonical listing of every file of a task version
    (paths relative to the ``v<N>/`` folder). Raises ValueError on an unclean path."""
    return blob_digest(task_listing(files))
