"""The agent's in-memory workspace: a copy of the task's inputs, and nothing else.

Nothing the agent does touches the disk: the workspace is a dict of path -> bytes that
starts as a copy of ``task.inputs``. So "nothing outside the workspace exists for the
agent" holds by construction, not by checking, and a run leaves no files behind except its
evidence. The workspace knows nothing about permissions (``paths.decide`` does); it keeps
the counts the output bound needs and remembers which paths were written, so the runtime
can record exactly the files that differ from the inputs as artifacts.
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["Workspace"]


class Workspace:
    """Files by normalised path. Reads and writes take paths already passed by ``decide``."""

    def __init__(self, inputs: Mapping[str, bytes]):
        self._files: dict[str, bytes] = {p: bytes(b) for p, b in inputs.items()}
        self._inputs = frozenset(inputs)
        self.written: list[str] = []
        self.bytes_written = 0

    def read(self, path: str) -> bytes | None:
        """The file's bytes, or ``None`` when no such file exists."""
        return self._files.get(path)

    def would_exceed(self, data: bytes, limit: int) -> bool:
        """Would writing ``data`` take the run's written output past ``limit`` bytes?"""
        return self.bytes_written + len(data) > limit

    def write(self, path: str, data: bytes) -> None:
        """Create or replace ``path``; every byte written counts toward the output bound."""
        self._files[path] = bytes(data)
        self.bytes_written += len(data)
        if path not in self.written:
            self.written.append(path)

    def files(self) -> dict[str, bytes]:
        """A copy of every file, as the checks see them."""
        return dict(self._files)

    def artifacts(self, outputs: list[str] | tuple[str, ...] = ()) -> dict[str, bytes]:
        """The files to record as artifacts, sorted by path: every path the agent wrote
        plus every declared output present. The inputs overlaid with these are the
        workspace the checks judged."""
        paths = set(self.written) | {p for p in outputs if p in self._files}
        return {p: self._files[p] for p in sorted(paths)}

    def listing(self) -> list[str]:
        """Every path in the workspace, sorted."""
        return sorted(self._files)
