"""What the reading stage (``_reading``) found in a bundle: a typed, read-only index.

Every entry has been inflated and hashed once by then; the steps read only this index (and
hand each other what they accepted: step 2 the runs, step 4 the calls' costs), never the
zip. What the index keeps of an entry is what some step reads of it, and no more:

- every entry: its size and SHA-256, or the error that kept it from being read;
- a run log: its bytes as the zip deflated them, its first and last record, the digests
  its records reference, or the error its parse stopped at (``RunLog``). Its records are
  parsed again from those bytes when a step asks (``RunLog.records``), never all held at
  once: at 20,000 runs they would be a gigabyte;
- an object: its digest; a request's or raw usage blob's reading (``_costs.derive``); a
  reply's text; the bytes of the few objects read whole (catalogs, specs, task listings),
  and of one no reading could be taken of (the step that needs it reports why). Requests,
  observations, written contents and artifacts are not kept: the steps compare what they
  recompute with the object's digest;
- a ledger: its chained records, or its chain error; each experiment's journal;
- every other entry (tasks, journals, summary, spec) but the site pages (read by no step):
  its bytes.

Nothing here changes once ``_reading.reading`` yields it: the mappings are read-only.
"""

from __future__ import annotations

import zlib
from array import array
from itertools import starmap
from operator import itemgetter
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, NamedTuple

from ..formats import jsonio
from ._errors import VerificationError
from ._zip import Limits
from .manifest import Manifest, object_path

__all__ = ["Index", "RunLog", "Run", "ObjectReading", "Rec", "frozen"]


def frozen(d: dict) -> Mapping:
    """A read-only view of ``d`` (the reading stage hands over and forgets the dict)."""
    return MappingProxyType(d)


class Rec(NamedTuple):
    """A chained record of a run log or ledger once its chain is checked: what the steps and
    the analysis read of a ``records.Record`` (its line bytes and link to the one before
    are read by nothing after the check), in a fifth of the memory."""

    seq: int
    at: str
    kind: str
    body: dict


@dataclass(frozen=True, slots=True)
class RunLog:
    """A run log as read, in a few kilobytes: ``packed``, its bytes as the zip deflated them
    (``stored``: as they are); ``count`` records, the ``first`` and ``last`` (every step
    reads them); the first record whose body is ill-typed (its line and error, or 0 and
    None); the digests each record before it references, as raw 32-byte SHA-256 values
    one after another in ``refs``, record i's ending at ``ref_ends[i]``; ``fault``: a first
    record that is not ``run.start`` or a last that is not ``run.end``. A log whose chain
    is broken is its ``VerificationError`` instead."""

    packed: bytes
    stored: bool
    count: int
    first: Rec | None
    last: Rec | None
    bad_line: int
    bad: VerificationError | None
    refs: bytes
    ref_ends: array
    fault: VerificationError | None = None

    def records(self) -> tuple[Rec, ...]:
        """The records, parsed afresh from ``packed`` (nothing is kept: the caller holds
        them as long as it reads them). The bytes, chain and envelopes were checked by
        the reading stage, so this parse cannot fail."""
        data = self.packed if self.stored else zlib.decompress(self.packed, -15)
        # one JSON array, not a parse a line: each line parsed alone as a JSON object, and a
        # raw newline cannot occur inside one, so the newlines are exactly the separators
        # (each record made by C-level map/starmap, not a Python call a record: half the time)
        return tuple(starmap(Rec, map(_ENVELOPE, jsonio.loads(b"[" + data[:-1].replace(b"\n", b",") + b"]"))))

    def refs_of(self, line: int) -> bytes:
        """The raw digests record ``line`` (1-based, before ``bad_line``) references."""
        return self.refs[self.ref_ends[line - 2] if line > 1 else 0:self.ref_ends[line - 1]]


_ENVELOPE = itemgetter("seq", "at", "kind", "body")  # a parsed record's ``Rec`` fields, in order


def _rec(obj: dict) -> Rec:
    return Rec(obj["seq"], obj["at"], obj["kind"], obj["body"])


@dataclass(frozen=True, slots=True)
class ObjectReading:
    """What the steps read of an object besides its digest. ``derived``: ``_costs.derive``'s
    reading of a request or raw usage blob (None when it could not take one); ``text``: a
    reply's text; ``data``: the bytes, for an object read whole."""

    derived: tuple | None = None
    text: str | None = None
    data: bytes | None = None


@dataclass(frozen=True)
class Run:
    """A run that step 2 accepted: its id, bundle path and log. Its records are parsed on
    first use and kept in ``_recent``, a slot the index shares between all its runs: the
    steps read runs one at a time, so at most one run's records are held, however many
    runs the bundle has (reading another run's replaces them)."""

    run_id: str
    path: str
    log: RunLog
    _recent: list = field(default_factory=lambda: [None, (), {}], repr=False, compare=False)

    @property
    def records(self) -> tuple[Rec, ...]:
        slot = self._recent
        if slot[0] is not self.log:
            slot[:] = [None, self.log.records(), {}]  # the old run's records go first
            slot[0] = self.log
        return slot[1]

    @property
    def start(self) -> dict:
        return self.log.first.body

    @property
    def end(self) -> dict:
        return self.log.last.body

    @property
    def started_at(self) -> str:
        """``run.start``'s ``at``, without parsing the records."""
        return self.log.first.at

    @property
    def count(self) -> int:
        """How many records the run has (the last one's line), without parsing them."""
        return self.log.count

    @property
    def policy(self) -> dict:
        """``run.start.policy`` ({} when null); its field types were checked in step 2."""
        return self.start.get("policy") or {}

    def of_kind(self, kind: str) -> list[tuple[int, Rec]]:
        """(1-based line, record) of every record of ``kind`` (grouped on first use)."""
        records = self.records
        kinds = self._recent[2]
        if not kinds:
            for i, r in enumerate(records, 1):
                kinds.setdefault(r.kind, []).append((i, r))
        return kinds.get(kind, [])


@dataclass(frozen=True)
class Index:
    limits: Limits
    names: tuple[str, ...]                       # every entry, in archive order
    sizes: Mapping[str, int]                     # entry -> uncompressed size
    manifest: Manifest
    digests: Mapping[str, str]                   # entry -> sha256:<hex> of its bytes (read ones)
    unread: Mapping[str, VerificationError]      # entry -> why it could not be inflated
    run_logs: Mapping[str, RunLog | VerificationError]   # runs/... entry -> its parse
    objects: Mapping[str, ObjectReading]         # objects/... entry -> what is kept of it
    ledgers: Mapping[str, tuple | VerificationError]     # ledgers/... entry -> chained records
    journals: Mapping[str, list | VerificationError]     # experiment -> (entry, line, Record)
    content: Mapping[str, bytes]                 # every other entry's bytes
    task_files: Mapping[str, Mapping[str, bytes]]  # tasks/<id>/v<N> -> {relative path: bytes}
    registered: frozenset | None                 # registration digests the auditor holds
    recent: list = field(default_factory=lambda: [None, (), {}], repr=False, compare=False)
    # ^ the one run whose records are held (``Run.records``): a memo, not evidence

    def has(self, name: str) -> bool:
        return name in self.sizes

    def read(self, name: str, where: str = "", record: int | str | None = None) -> bytes:
        """The bytes of an entry the index keeps whole. Raises VerificationError (naming
        ``where`` and ``record`` when given) if the bundle lacks it or it was unreadable."""
        if name in self.content:
            return self.content[name]
        got = self.objects.get(name)
        if got is not None and got.data is not None:
            return got.data
        if name not in self.sizes:
            raise VerificationError(where or name, f"{name} is missing from the bundle", record)
        if name in self.unread:
            raise self.unread[name]
        raise VerificationError(where or name, f"{name} is not kept by the reading stage", record)

    def read_json(self, name: str, where: str = "", record: int | str | None = None):
        """Parse entry ``name`` as JSON, depth-bounded. Raises VerificationError."""
        data = self.read(name, where, record)
        try:
            obj = jsonio.loads(data)
            jsonio.check_depth(obj, self.limits.json_depth)
        except ValueError as e:
            raise VerificationError(name, f"not valid JSON ({e})") from None
        return obj

    def reading(self, digest: str) -> ObjectReading:
        """What is kept of the object ``digest`` (an empty reading when nothing is)."""
        return self.objects.get(object_path(digest), _NOTHING)

    def names_under(self, prefix: str) -> list[str]:
        return [n for n in self.names if n.startswith(prefix)]


_NOTHING = ObjectReading()
