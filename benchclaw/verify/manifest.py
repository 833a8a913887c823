"""The bundle's manifest and layout (docs/FORMAT.md "Bundles"), shared by export and verify.

It lives under ``verify`` because the verifier is what defines an acceptable bundle;
``benchclaw.bundle`` imports it to write one. Pure: standard library and ``jsonio``.

The manifest is canonical JSON, so its SHA-256 (the bundle's identity) depends only on
the files it lists, never on the zip compressor that packed them. ``exploratory: true``
labels the bundle of an exploratory journal (the studio's): it is written only then, so an
experiment's manifest is byte for byte what it was before the label existed.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from ..formats import jsonio
from ._errors import UnreadableBundle

__all__ = ["MANIFEST", "BUNDLE_FORMAT", "BUNDLE_VERSION", "FileEntry", "Manifest",
           "build_manifest", "parse_manifest", "path_order", "RUN_PATH", "OBJECT_PATH",
           "object_path", "run_path"]

MANIFEST = "manifest.json"
BUNDLE_FORMAT = "benchclaw-bundle"
BUNDLE_VERSION = 1
RUN_PATH = re.compile(r"^runs/([0-9a-f]{2})/([0-9a-f]{64})\.jsonl$")
OBJECT_PATH = re.compile(r"^objects/([0-9a-f]{2})/([0-9a-f]{64})$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_EXPERIMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_KEYS = {"v", "format", "experiments", "files", "exploratory"}
_FILE_KEYS = {"path", "digest", "size"}


def object_path(digest: str) -> str:
    """Where the blob ``sha256:<hex>`` lives in a bundle (and in a runs directory)."""
    hexd = digest.removeprefix("sha256:")
    return f"objects/{hexd[:2]}/{hexd}"


def run_path(run_id: str) -> str:
    return f"runs/{run_id[:2]}/{run_id}.jsonl"


def path_order(path: str) -> bytes:
    """Entries and manifest rows are sorted by the UTF-8 bytes of their path."""
    return path.encode("utf-8")


@dataclass(frozen=True, slots=True)  # one per entry: hundreds of thousands in a large bundle
class FileEntry:
    path: str
    digest: str
    size: int

    def to_dict(self) -> dict:
        return {"path": self.path, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class Manifest:
    experiments: tuple[str, ...]
    files: tuple[FileEntry, ...]
    digest: str = ""
    exploratory: bool = False

    def to_bytes(self) -> bytes:
        obj = {"v": BUNDLE_VERSION, "format": BUNDLE_FORMAT, "experiments": list(self.experiments),
               "files": [f.to_dict() for f in self.files]}
        if self.exploratory:
            obj["exploratory"] = True
        return jsonio.dumps(obj)


def build_manifest(experiments: list[str], files: dict[str, bytes], *, exploratory: bool = False) -> Manifest:
    """The manifest of ``files`` (path -> bytes), rows sorted by path; ``digest`` set."""
    rows = tuple(FileEntry(p, "sha256:" + hashlib.sha256(files[p]).hexdigest(), len(files[p]))
                 for p in sorted(files, key=path_order))
    m = Manifest(tuple(experiments), rows, exploratory=exploratory)
    return Manifest(m.experiments, m.files, "sha256:" + hashlib.sha256(m.to_bytes()).hexdigest(), exploratory)


def _bad(message: str) -> UnreadableBundle:
    return UnreadableBundle(MANIFEST, message)


def parse_manifest(data: bytes, depth_limit: int = 8) -> Manifest:
    """Parse manifest bytes. Raises ``UnreadableBundle`` naming the field at fault.

    Duplicate rows are kept (``files`` may repeat a path): the container step reports them.
    """
    try:
        obj = jsonio.loads(data)
        jsonio.check_depth(obj, depth_limit)
    except ValueError as e:
        raise _bad(f"not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise _bad("must be a JSON object")
    if obj.get("format") != BUNDLE_FORMAT or obj.get("v") != BUNDLE_VERSION:
        raise _bad(f"format {obj.get('format')!r} version {obj.get('v')!r} is not "
                   f"{BUNDLE_FORMAT!r} version {BUNDLE_VERSION}")
    extra = sorted(set(obj) - _KEYS)
    if extra:
        raise _bad(f"unknown field(s) {extra}")
    exps = obj.get("experiments")
    if not isinstance(exps, list) or not exps or not all(
            isinstance(e, str) and _EXPERIMENT.match(e) for e in exps):
        raise _bad("field 'experiments': a non-empty list of experiment ids")
    rows = obj.get("files")
    if not isinstance(rows, list):
        raise _bad("field 'files': a list of {path, digest, size}")
    if "exploratory" in obj and obj["exploratory"] is not True:
        raise _bad("field 'exploratory': true when present (an exploratory journal's bundle)")
    files = tuple(_parse_row(r, i) for i, r in enumerate(rows))
    return Manifest(tuple(exps), files, "sha256:" + hashlib.sha256(data).hexdigest(), "exploratory" in obj)


def _parse_row(row, i: int) -> FileEntry:
    where = f"files[{i}]"
    if not isinstance(row, dict) or set(row) != _FILE_KEYS:
        raise _bad(f"{where}: must be an object with exactly path, digest, size")
    path, digest, size = row["path"], row["digest"], row["size"]
    if not isinstance(path, str) or not path:
        raise _bad(f"{where}.path: must be a non-empty string")
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise _bad(f"{where}.digest: must be sha256:<64 hex>")
    if type(size) is not int or size < 0:
        raise _bad(f"{where}.size: must be a non-negative integer")
    return FileEntry(path, digest, size)
