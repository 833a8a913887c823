"""What the steps share: the validated zip, the manifest, and what earlier steps established.

Every entry is inflated and hashed once, before step 2 ends (the objects and run logs in a
forked worker, ``_container``). Only the bytes several steps read are kept (journals,
tasks, small entries); the run logs and ledgers are kept as their parsed records (without
their line bytes, once the chains are checked), the objects as what step 4 derives from
them, and anything else is inflated again when a later step needs it. ``Bundle.read``
never touches the disk; ``Bundle.files`` is a read-only mapping over every entry for the
analysis. Later steps only build on what earlier ones accepted: a run whose chain is
broken is reported by step 2 and left out of steps 3-6, so one fault is reported where
it is, not five times downstream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .. import jsonio
from ..records import Record
from ._errors import VerificationError
from ._zip import Limits, ZipView
from .manifest import Manifest

__all__ = ["Bundle", "RunData"]


@dataclass
class RunData:
    """A run that passed step 2: its id, bundle path and verified records."""

    run_id: str
    path: str
    records: list[Record]
    _kinds: dict = field(default_factory=dict, repr=False)
    call_costs: dict = field(default_factory=dict, repr=False)  # line -> CostBounds step 4 confirmed

    @property
    def start(self) -> dict:
        return self.records[0].body

    @property
    def end(self) -> dict:
        return self.records[-1].body

    @property
    def policy(self) -> dict:
        """``run.start.policy`` ({} when null); its field types were checked in step 2."""
        return self.start.get("policy") or {}

    def of_kind(self, kind: str) -> list[tuple[int, Record]]:
        """(1-based line, record) of every record of ``kind`` (indexed once)."""
        if not self._kinds:
            for i, r in enumerate(self.records, 1):
                self._kinds.setdefault(r.kind, []).append((i, r))
        return self._kinds.get(kind, [])


@dataclass
class Bundle:
    view: ZipView
    limits: Limits
    manifest: Manifest | None = None
    digests: dict[str, str] = field(default_factory=dict)   # entry -> actual sha256:<hex>
    content: dict[str, bytes] = field(default_factory=dict)
    runs: dict[str, RunData] = field(default_factory=dict)  # run id -> run (passed step 2)
    bad_runs: set[str] = field(default_factory=set)         # run ids present but failed step 2
    journal: list = field(default_factory=list)             # [(path, line, Record)] ordered
    task_files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # tasks/x/vN -> files
    tasks: dict = field(default_factory=dict)               # tasks/x/vN -> Task or its error
    ledgers: dict = field(default_factory=dict)             # ledger id -> replay (step 5)
    journals: dict = field(default_factory=dict)            # experiment -> records or error
    memo: dict = field(default_factory=dict)                # pure recomputations, by their inputs
    object_hashing: tuple | None = None                     # (object names, Pending) until step 1
    parsed: dict = field(default_factory=dict)              # run entry -> step 2's parse, done early
    derived: dict = field(default_factory=dict)             # object -> step 4's reading (_costs.derive)
    registered: frozenset | None = None                     # registration digests the auditor holds

    def has(self, name: str) -> bool:
        return name in self.view.entries

    def read(self, name: str, where: str = "", record: int | str | None = None) -> bytes:
        """The bytes of entry ``name``. Raises VerificationError (naming ``where`` and
        ``record`` when given) if the bundle has no such entry or it could not be read."""
        if name in self.content:
            return self.content[name]
        if name not in self.view.entries:
            raise VerificationError(where or name, f"{name} is missing from the bundle", record)
        return self.view.read(name)  # inflated again, capped and CRC-checked, not kept

    def read_json(self, name: str, where: str = "", record: int | str | None = None):
        """Parse entry ``name`` as JSON, depth-bounded. Raises VerificationError."""
        data = self.read(name, where, record)
        try:
            obj = jsonio.loads(data)
            jsonio.check_depth(obj, self.limits.json_depth)
        except ValueError as e:
            raise VerificationError(name, f"not valid JSON ({e})") from None
        return obj

    @property
    def files(self) -> "_Files":
        """Every entry as a read-only ``{name: bytes}`` mapping (objects inflated on access)."""
        return _Files(self)

    def names_under(self, prefix: str) -> list[str]:
        return [n for n in self.view.entries if n.startswith(prefix)]


class _Files(Mapping):
    def __init__(self, b: Bundle):
        self._b = b

    def __getitem__(self, name: str) -> bytes:
        if name not in self._b.view.entries:
            raise KeyError(name)
        return self._b.read(name)

    def __contains__(self, name) -> bool:
        return name in self._b.view.entries

    def __iter__(self):
        return iter(self._b.view.entries)

    def __len__(self) -> int:
        return len(self._b.view.entries)
