"""Step 4, the costs: every cost and bound recomputed from recorded usage and catalog prices.

Per run: the ``prices`` copied into ``run.start`` must be the tier's prices in the
catalog file the run names (read from its blob, following ``extends``). Per ``call``:
the prompt estimate is recomputed from the request blob's messages; the normalised
usage from the raw usage blob (``money.normalise_usage``); the cost, or the
``[0, upper bound]`` of a call whose usage is unknown, from both (``money.cost_bounds``),
bit for bit as decimal strings; for a streamed call without usage the lower bound is
recounted from its request, its reply and its text chunk count (``money.stream_floor``). ``run.end`` totals must be the sums over the calls.

The catalog is parsed with ``benchclaw.formats.catalog``, the parser the runtime loads
catalogs with (pure, so the verifier imports nothing from ``benchclaw.providers``);
``extends`` is resolved from the bundle by the digest the run recorded. Results that later
steps need again (a call's confirmed cost, an upper bound) are kept, never recomputed.

A request's estimate and a usage blob's normalised usage are derived (``derive``) by the
reading stage while it has the object's bytes in hand, so the objects are inflated once;
only the fully well-formed readings are kept, and of anything else the bytes, which this
step reads and fails on with the message it always gave. The step returns what step 5
ties to the ledgers (``Costs``): each run's confirmed prices and each call's cost.
"""

from __future__ import annotations

from array import array
from collections import ChainMap
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import Container, Mapping, NamedTuple

from ..formats import jsonio, money
from ..formats.catalog import MAX_EXTENDS, Catalog, parse_catalog
from ..errors import BenchClawError, FormatError
from ..formats.money import (USAGE_FIELDS, CostBounds, Prices, Usage, call_cost_of,
                             cost_upper_bound, estimate_prompt_tokens, fmt_usd, message_bytes,
                             read_usage, stream_floor, sum_usage, add_usd)
from ..formats.records import DIGEST_RE
from ._errors import VerificationError
from ._index import Index, Run
from ._report import Section
from ._simusage import check_simulated_usage, sim_facts
from .manifest import object_path

__all__ = ["verify_costs", "Costs", "TakenCalls", "upper_bound", "derive", "per_run"]


class Confirmed(NamedTuple):
    """A call as step 4 confirmed it, what step 5 ties to the ledger: its line, key
    (``turn.attempt``), prompt estimate and max_tokens (ints), usage total (None without
    usage) and cost."""

    line: int
    key: str
    estimate: int
    max_tokens: int
    tokens: int | None
    cost: CostBounds


class RunCalls:
    """The calls of one run step 4 confirmed, in line order, as ``Confirmed`` again when
    read: their counts four to a call in one array (ints past 64 bits: a list), their keys
    and costs in lists. A grid's 58,000 calls as tuples and ints were ~10 MB."""

    __slots__ = ("_nums", "_keys", "_costs")

    def __init__(self):
        self._nums, self._keys, self._costs = array("q"), [], []

    def add(self, call: Confirmed) -> None:
        nums = (call.line, call.estimate, call.max_tokens, -1 if call.tokens is None else call.tokens)
        try:
            self._nums.extend(nums)
        except OverflowError:
            self._nums = list(self._nums) + list(nums)
        self._keys.append(call.key)
        self._costs.append(call.cost)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self):
        nums = self._nums
        for i, (key, cost) in enumerate(zip(self._keys, self._costs)):
            line, estimate, max_tokens, tokens = nums[4 * i:4 * i + 4]
            yield Confirmed(line, key, estimate, max_tokens, None if tokens < 0 else tokens, cost)

    def cost_of(self, line: int) -> CostBounds | None:
        try:
            return self._costs[self._nums[0::4].index(line)]
        except ValueError:
            return None

    def row(self) -> tuple:
        """The calls as plain values (``RunFacts.costs``): the counts, the keys, and each
        cost as (known, low, high), the decimals as their exact strings."""
        return (tuple(self._nums), tuple(self._keys),
                tuple((c.known, str(c.low), str(c.high)) for c in self._costs))

    @classmethod
    def from_row(cls, row: tuple, keys: dict, costs: dict) -> "RunCalls":
        """The inverse of ``row``; ``keys`` and ``costs``: the values already made, each
        held once (a grid's calls repeat a few keys and costs)."""
        nums, call_keys, call_costs = row
        got = cls()
        try:
            got._nums = array("q", nums)
        except OverflowError:
            got._nums = list(nums)
        got._keys = [keys.setdefault(k, k) for k in call_keys]
        for c in map(tuple, call_costs):  # a JSON list or a tuple
            cost = costs.get(c)
            if cost is None:
                cost = costs[c] = CostBounds(c[0], Decimal(c[1]), Decimal(c[2]))
            got._costs.append(cost)
        return got


class TakenCalls(Mapping):
    """``Costs.calls``: run id -> its ``RunCalls``. A run step 4 read itself is held; one
    whose calls it took from the reading stage's facts (``taken``: run id -> its log's
    name) is made again from that fact in the index when asked, the last one kept (step 5
    reads a run's calls together): a grid's 220,000 calls held as objects were 36 MB."""

    __slots__ = ("_own", "_taken", "_ix", "_last")

    def __init__(self, own: Mapping[str, RunCalls], taken: Mapping[str, str], ix: Index | None = None):
        self._own, self._taken, self._ix, self._last = own, taken, ix, (None, None)

    def __getitem__(self, run_id: str) -> RunCalls:
        got = self._own.get(run_id)
        if got is not None:
            return got
        name = self._taken[run_id]
        if self._last[0] != run_id:
            self._last = (run_id, RunCalls.from_row(self._ix.facts_of(name).costs, {}, {}))
        return self._last[1]

    def __contains__(self, run_id) -> bool:
        return run_id in self._own or run_id in self._taken

    def __iter__(self):
        yield from self._own
        yield from self._taken

    def __len__(self) -> int:
        return len(self._own) + len(self._taken)


@dataclass(frozen=True)
class Costs:
    """What step 4 hands step 5: each run's prices (or why they are not the catalog's), and
    each call it confirmed, by run id and line (in line order); ``whole``: the runs whose
    every call it confirmed (step 5 then reads their calls here, not from the records)."""

    prices: Mapping[str, Prices | VerificationError]
    calls: Mapping[str, RunCalls]
    whole: Container[str] = frozenset()

    @classmethod
    def none(cls) -> "Costs":
        return cls(MappingProxyType({}), MappingProxyType({}))

    def cost_of(self, run_id: str, line: int) -> CostBounds | None:
        """The cost step 4 recomputed for the call at ``line`` (None when it did not)."""
        got = self.calls.get(run_id)
        return None if got is None else got.cost_of(line)

    def confirmed(self, run_id: str) -> tuple[Confirmed, ...] | None:
        """Every call of the run, as step 4 confirmed it; None unless it confirmed them all."""
        return tuple(self.calls[run_id]) if run_id in self.whole else None

    def prices_of(self, run: Run) -> Prices:
        """The run's confirmed prices. Raises VerificationError when step 4 refused them."""
        got = self.prices.get(run.run_id)
        if got is None:
            raise VerificationError(run.path, "step 4 did not confirm the run's prices", 1)
        if isinstance(got, VerificationError):
            raise got
        return got


class _Step:
    """Step 4's state: the index, its pure recomputations by their inputs (a catalog's tier,
    a usage blob's normalisation), and what it hands step 5."""

    def __init__(self, ix: Index):
        self.ix, self.cache = ix, {}
        self.prices: dict[str, Prices | VerificationError] = {}
        self.calls: dict[str, RunCalls] = {}
        self.whole: set[str] = set()
        self.taken: dict[str, str] = {}  # run id -> its log's name: calls confirmed by the reading stage
        self.keys: dict[str, str] = {}  # a call key, held once (a grid repeats "0.0", "1.0", ...)
        self.keys_by_id: dict[tuple, tuple] = {}  # key()
        self.call_readings: dict = {}  # digest -> its reading, for the call being checked

    def key(self, values: list) -> bytes:
        """``jsonio.dumps(values)``, once per the very objects: the reading stage holds the
        values repeated across runs' ``run.start`` once, so a grid's runs share a few keys.
        The values are kept with it (their ids stay theirs). Raises what dumps raises."""
        ids = tuple(map(id, values))
        got = self.keys_by_id.get(ids)
        if got is None:
            got = self.keys_by_id[ids] = (jsonio.dumps(values), values)
        return got[0]

    def reading(self, digest: str):
        """``ix.reading(digest)``, once per call record: a call's checks read its request
        and reply more than once, and the index may unpack a reading on each read."""
        got = self.call_readings.get(digest)
        if got is None:
            got = self.call_readings[digest] = self.ix.reading(digest)
        return got

    def catalog(self, run: Run) -> Catalog:
        """The catalog the run names, parsed from its blob (``_simusage`` reads its tier's
        simulator profile). Raises VerificationError."""
        return _catalog(self, run, run.start.get("catalog"))


def verify_costs(ix: Index, runs, sec: Section) -> Costs:
    """Each run as ``per_run`` finds it: its calls as the reading stage confirmed them when
    it did (the run holds; they stay in the index, ``TakenCalls``), else the run read here
    (and its fault reported)."""
    b = _Step(ix)
    for run in runs.values():
        taken = ix.facts_of(run.path).costs
        if taken is None:
            sec.attempt(_run_costs, b, run, lambda n: sec.count("calls", n))
        else:
            sec.attempt(_taken, b, run, taken, sec)
    sec.count("runs", len(runs))
    whole = ChainMap(dict.fromkeys(b.whole), b.taken)  # (``in``: in either; a taken run's calls are all confirmed)
    return Costs(MappingProxyType(b.prices), TakenCalls(b.calls, b.taken, ix), whole)


def _taken(b: _Step, run: Run, taken: tuple, sec: Section) -> None:
    """A run whose calls the reading stage confirmed: its prices (what step 5 reads, once
    per distinct catalog, tier and prices) and its calls' count; the calls themselves are
    read from the index again when step 5 asks (``TakenCalls``)."""
    catalog_prices(b, run)
    b.taken[run.run_id] = run.path
    sec.count("calls", len(taken[1]))


def per_run(ix: Index, run: Run, cache: dict) -> tuple:
    """Step 4 on one run, pure: its calls as confirmed (``RunCalls.row``). Raises
    VerificationError at the run's first fault. The reading stage takes it of every run
    (``_reading``, D); ``cache``: this step's pure recomputations, shared across runs."""
    b = cache.get(_Step)
    if b is None:
        b = cache[_Step] = _Step(ix)
    b.prices.clear(), b.calls.clear(), b.whole.clear()  # what the step keeps, it keeps itself
    _run_costs(b, run, lambda n: None)
    return b.calls[run.run_id].row()


def _blob(b: _Step, run: Run, digest, line: int, what: str) -> bytes:
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise VerificationError(run.path, f"{what} {digest!r} is not a blob digest", line)
    return b.ix.read(object_path(digest), run.path, line)


def _catalog(b: _Step, run: Run, ref, depth: int = 0) -> Catalog:
    """The catalog ``ref`` ({name, digest, extends?}) names, parsed from its blob."""
    if not isinstance(ref, dict) or depth > MAX_EXTENDS:
        raise VerificationError(run.path, "run.start.catalog is not {name, digest}", 1)
    data = _blob(b, run, ref.get("digest"), 1, "catalog")
    where = object_path(ref["digest"])

    def resolve(_name: str) -> Catalog:
        if "extends" not in ref:
            raise VerificationError(where, "the catalog extends another, which run.start.catalog does not record")
        return _catalog(b, run, ref["extends"], depth + 1)

    try:
        cat = parse_catalog(data, where, resolve_base=resolve)
    except FormatError as e:
        raise VerificationError(where, str(e).removeprefix(f"{where}: ")) from None
    if "extends" in ref and cat.base is None:
        raise VerificationError(where, "run.start.catalog records a base catalog this catalog does not extend")
    return cat


def _cached_prices(b: _Step, run: Run, tier) -> Prices:
    """A catalog is parsed once per (catalog, tier), not once per run."""
    key = ("prices", jsonio.dumps(run.start.get("catalog")), tier)
    if key not in b.cache:
        try:
            t = _catalog(b, run, run.start.get("catalog")).tier(tier if isinstance(tier, str) else "")
            b.cache[key] = t.prices
            b.cache[("model", key[1], tier)] = (t.model, t.provider)
        except VerificationError as e:
            b.cache[key] = e
        except (BenchClawError, ValueError) as e:
            b.cache[key] = VerificationError(run.path, str(e), 1)
    if isinstance(b.cache[key], VerificationError):
        err = b.cache[key]
        raise VerificationError(run.path, err.message, 1)
    return b.cache[key]


def catalog_prices(b: _Step, run: Run) -> Prices:
    """The prices of the run's tier in the catalog it names; must equal ``run.start.prices``.
    Raises VerificationError. Kept, confirmed or refused, for step 5."""
    try:
        got = b.prices[run.run_id] = _confirmed_prices(b, run)
    except VerificationError as e:
        b.prices[run.run_id] = e
        raise
    return got


def _confirmed_prices(b: _Step, run: Run) -> Prices:
    """``_check_prices``, once per distinct (catalog, tier, model, provider, prices) of the
    runs: a pure verdict on those values alone (a grid's runs share a few), kept as the
    prices or the message, and told in each run's name."""
    st = run.start
    try:
        key = ("confirmed", b.key([st.get(k) for k in ("catalog", "tier", "model", "provider", "prices")]))
    except (TypeError, ValueError):  # not writable as canonical JSON (a lone surrogate): no memo
        return _check_prices(b, run)
    got = b.cache.get(key)
    if got is None:
        try:
            got = b.cache[key] = _check_prices(b, run)
        except VerificationError as e:
            got = b.cache[key] = e.message
    if isinstance(got, str):
        raise VerificationError(run.path, got, 1)
    return got


def _check_prices(b: _Step, run: Run) -> Prices:
    tier = run.start.get("tier")
    prices = _cached_prices(b, run, tier)
    model = b.cache.get(("model", jsonio.dumps(run.start.get("catalog")), tier))
    if model is not None and (run.start.get("model"), run.start.get("provider")) != model:
        raise VerificationError(run.path, f"run.start model/provider {run.start.get('model')!r}/"
                                f"{run.start.get('provider')!r}, tier {tier!r} of the catalog is "
                                f"{model[0]!r}/{model[1]!r}", 1)
    try:
        recorded = Prices.from_dict(run.start.get("prices"), "run.start.prices")
    except (BenchClawError, ValueError) as e:
        raise VerificationError(run.path, str(e), 1) from None
    if recorded.to_dict() != prices.to_dict() or run.start.get("prices") != prices.to_dict():
        raise VerificationError(run.path, f"run.start.prices {run.start.get('prices')} differ from "
                                f"tier {tier!r} of the catalog: {prices.to_dict()}", 1)
    return prices


def _run_costs(b: _Step, run: Run, count) -> None:
    """The run's prices and calls checked, kept for step 5; ``count(n)``: it has n calls."""
    prices = catalog_prices(b, run)
    usages, known, low, high = [], True, Decimal(0), Decimal(0)  # CostBounds.zero(), added as its __add__ adds
    calls = run.of_kind("call")
    costs = b.calls[run.run_id] = RunCalls()
    for line, rec in calls:
        usage, cost = _call(b, run, line, rec.body, prices, costs)
        usages.append(usage)
        known, low, high = known and cost.known, add_usd(low, cost.low), add_usd(high, cost.high)
    b.whole.add(run.run_id)
    count(len(calls))
    _totals(run, len(calls), [u for u in usages if u is not None], CostBounds(known, low, high))


def _call(b: _Step, run: Run, line: int, body: dict, prices: Prices,
          costs: RunCalls) -> tuple[Usage | None, CostBounds]:
    b.call_readings.clear()
    params = body.get("params") if isinstance(body.get("params"), dict) else {}
    max_tokens, estimate = params.get("max_tokens"), body.get("prompt_estimate")
    if type(max_tokens) is not int or type(estimate) is not int or max_tokens < 0 or estimate < 0:
        raise VerificationError(run.path, "call: params.max_tokens or prompt_estimate is not a count", line)
    sim = _check_estimate(b, run, line, body, estimate, max_tokens)
    usage, unread = _check_usage(b, run, line, body, sim)
    floor = _stream_floor(b, run, line, body, max_tokens) if usage is None and "stream" in body else None
    try:
        got = call_cost_of(usage, estimate, max_tokens, prices, unread=unread, error=body.get("error"), floor=floor)
        want = got.cost
    except (BenchClawError, ArithmeticError, ValueError) as e:
        raise VerificationError(run.path, f"call: cannot recompute the cost ({e})", line) from None
    if body.get("cost") != want.to_dict():
        raise VerificationError(run.path, f"call cost {body.get('cost')} differs from the "
                                f"recomputed {want.to_dict()}", line)
    if body.get("usage_doubts") != (list(got.doubts) or None):  # written only when there are some
        raise VerificationError(run.path, f"call usage_doubts {body.get('usage_doubts')} differ from the "
                                f"recomputed {list(got.doubts)}", line)
    key = f"{body.get('turn')}.{body.get('attempt')}"
    costs.add(Confirmed(line, b.keys.setdefault(key, key), estimate, max_tokens,
                        None if usage is None else usage.total, want))
    return usage, want


def _stream_floor(b: _Step, run: Run, line: int, body: dict, max_tokens: int) -> Usage:
    """The recorded lower bound of a streamed call without usage, recounted from its request
    and reply blobs and its ``stream.text_chunks`` (FORMAT §6, ``money.stream_floor``). A
    reply with text but no text chunk is an inconsistent record."""
    stream = body.get("stream")
    chunks = stream.get("text_chunks") if isinstance(stream, dict) else None
    if type(chunks) is not int or chunks < 0:
        raise VerificationError(run.path, "call: stream.text_chunks is not a count", line)
    known = _derived(b, run, body.get("request"), line, "request", ("r",))
    if known is not None:
        sent = known[5]
    else:
        request = _json_blob(b, run, line, body.get("request"), "request")
        messages = request.get("messages") if isinstance(request, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise VerificationError(run.path, "call: the request blob holds no message list", line)
        sent = None
    reply = 0 if body.get("reply") is None else _reply_bytes(b, run, body["reply"], line)
    if reply > 0 and chunks == 0:
        raise VerificationError(run.path, "call: the streamed reply has text but stream.text_chunks is 0", line)
    try:
        return stream_floor(message_bytes(messages) if sent is None else sent, reply, chunks, max_tokens)
    except (ValueError, RecursionError, UnicodeError) as e:
        raise VerificationError(run.path, f"call: cannot recount the stream's lower bound ({e})", line) from None


def _reply_bytes(b: _Step, run: Run, reply, line: int) -> int:
    """A reply blob's length in bytes: its entry's size (step 2 tied the entry to the digest)."""
    if not isinstance(reply, str) or not DIGEST_RE.match(reply):
        raise VerificationError(run.path, f"reply {reply!r} is not a blob digest", line)
    if not b.ix.has(object_path(reply)):
        raise VerificationError(run.path, f"{object_path(reply)} is missing from the bundle", line)
    return b.ix.sizes[object_path(reply)]


def upper_bound(cache: dict, prices: Prices, estimate: int, max_tokens: int) -> str:
    """``fmt_usd(cost_upper_bound(...))``, once per (prices, estimate, max_tokens) in the
    caller's ``cache``: many calls of a grid share them. Raises what ``cost_upper_bound`` raises."""
    key = ("bound", prices, estimate, max_tokens)
    got = cache.get(key)
    if got is None:
        got = cache[key] = fmt_usd(cost_upper_bound(estimate, max_tokens, prices))
    return got


def sim_prompt_tokens(messages: list) -> int:
    """The simulator's prompt token count (FORMAT.md §6, "Simulated usage")."""
    return 3 + sum(message_tokens(messages))


def message_tokens(messages: list) -> list[int]:
    """Each message's share of ``sim_prompt_tokens`` (the 3 of the reply's priming aside):
    the prompt and its cached prefix are sums of these, counted once."""
    return [4 + (len(str(m.get("content") or "")) + 3) // 4 for m in messages]


def request_counts(messages: list) -> tuple[list[int], int, int, bool]:
    """(``message_tokens(messages)``, ``estimate_prompt_tokens(messages)``,
    ``message_bytes(messages)``, whether every value of every message is a string), in one
    walk: a message of an ASCII role and content (the usual one) is counted at once, its
    UTF-8 bytes its characters; any other by those three functions. Raises what they raise."""
    tokens, estimate, sent, strings = [], money.REQUEST_OVERHEAD_TOKENS, 0, True
    append, overhead = tokens.append, money.MESSAGE_OVERHEAD_TOKENS
    for m in messages:
        content, role = m.get("content"), m.get("role")
        if type(content) is str and type(role) is str and content.isascii() and role.isascii():
            n = len(content)
            append(4 + (n + 3) // 4)
            estimate += overhead + len(role) + n
            sent += n
            if strings and len(m) != 2:
                strings = all(type(v) is str for v in m.values())
        else:
            append(4 + (len(str(content or "")) + 3) // 4)
            estimate += money.message_tokens(m)
            sent += message_bytes((m,))
            strings = strings and all(type(v) is str for v in m.values())
    return tokens, estimate, sent, strings


try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is optional
    _orjson = None


def canon(value) -> bytes:
    """``jsonio.dumps`` (canonical JSON) without its walk for floats, for values the
    verifier builds from strings, ints and booleans (the replay's observations and
    conversation); anything orjson refuses goes the canonical way."""
    return jsonio.dumps_floatless(value)


def short_hash(value) -> str:
    """128 bits of the SHA-256 of ``value``'s canonical JSON (enough against a second
    preimage; half the memory of the full digest in the reading of every request)."""
    import hashlib

    return hashlib.sha256(canon(value)).hexdigest()[:32]


def conversation_hashes(messages: list, whole: bytes | None = None) -> list:
    """What step 3's replay needs of a request, so it never inflates a request again:
    [message count, hash of all messages, hash of all but the last two, hash of the last
    two, hash of the task message's content] (None where there is no such part).
    ``whole``: ``canon_list(messages)``, when there is one: each hash is then that of the
    very same bytes, the list serialised once (and its last two again) and the shared
    prefix hashed once."""
    n = len(messages)
    if whole is None:
        return [n, short_hash(messages), short_hash(messages[:-2]) if n > 2 else None,
                short_hash(messages[-2:]) if n > 2 else None,
                short_hash(messages[1].get("content")) if n >= 2 else None]
    import hashlib

    if n > 2:  # whole is "[" head "," m[-2] "," m[-1] "]", the last two's list "[" m[-2] "," m[-1] "]"
        last = canon_list(messages[-2:])
        k, view = len(last), memoryview(whole)
        h = hashlib.sha256(view[:-k])
        closed = h.copy()
        closed.update(b"]")
        h.update(view[-k:])
        head, tail = closed.hexdigest()[:32], hashlib.sha256(last).hexdigest()[:32]
    else:
        h, head, tail = hashlib.sha256(whole), None, None
    return [n, h.hexdigest()[:32], head, tail, _task_hash(messages[1].get("content")) if n >= 2 else None]


_TASK_HASHES: dict[str, str] = {}  # a task message -> its short_hash: every request of a run repeats it


def _task_hash(content) -> str:
    """``short_hash(content)``, once per task message text (a grid sends a few, each in
    every request: a SHA-256 of a few kilobytes each time); only so many, and only short
    ones, are kept, so a hostile bundle cannot grow it."""
    if type(content) is not str or len(content) > 65536:
        return short_hash(content)
    got = _TASK_HASHES.get(content)
    if got is None:
        got = short_hash(content)
        if len(_TASK_HASHES) < 256:
            _TASK_HASHES[content] = got
    return got


def canon_list(messages: list) -> bytes | None:
    """``canon(messages)`` when orjson takes the list whole (None otherwise: it goes the
    canonical way, and so must the callers): ``[``, each message's bytes joined by ``,``,
    ``]``, so any run of messages lies in it as its own bytes."""
    if _orjson is None:
        return None
    try:
        return _orjson.dumps(messages, option=_orjson.OPT_SORT_KEYS)
    except TypeError:
        return None


def _chars(data: bytes) -> int | None:
    try:
        return len(data.decode("utf-8", "surrogatepass"))
    except UnicodeDecodeError:
        return None


def derive(data: bytes, sim: bool = False) -> list | None:
    """What steps 3 and 4 read of an object, as JSON values (the reading stage takes it while
    it has the bytes in hand): ``["r", max_tokens, estimate, simulated prompt tokens,
    conversation hashes, message bytes, simulator facts]`` for a well-formed request (the
    facts, ``_simusage.sim_facts``, only with ``sim``: a request of a run on the simulator) (a message list of objects, an int
    ``max_tokens``), ``["u", usage dict or None, characters, unread fields]`` for any other JSON value
    (``_normalised``'s answer, the text's length for a reply, and what could change the
    bill but is not read: a doubt, FORMAT.md §6), ``["t", None, characters]``
    for text that is not JSON (a reply), None when reading raised anything else (step 4
    then reads the blob itself)."""
    if data[:1] not in (b"{", b"["):
        n = _chars(data)
        return None if n is None else ["t", None, n]
    try:
        obj = jsonio.loads(data)
    except ValueError:
        return None
    if isinstance(obj, dict) and "messages" in obj:
        messages, max_tokens = obj["messages"], obj.get("max_tokens")
        if type(max_tokens) is not int or not isinstance(messages, list) or \
                not all(isinstance(m, dict) for m in messages):
            return None
        try:
            whole = canon_list(messages)
            tokens, estimate, sent, strings = request_counts(messages)
            return ["r", max_tokens, estimate, 3 + sum(tokens), conversation_hashes(messages, whole), sent,
                    sim_facts(obj, whole, tokens, strings) if sim else None]
        except Exception:  # noqa: BLE001 - RecursionError and the like: step 4 reports it
            return None
    n = _chars(data)
    try:
        usage, unread = read_usage(obj)
    except (BenchClawError, ValueError, TypeError):
        return ["u", None, n, []]
    except Exception:  # noqa: BLE001 - step 4 reads it again and reports what it raises
        return None
    return ["u", usage.to_dict(), n, list(unread)]


def _derived(b: _Step, run: Run, digest, line: int, what: str, kind: str):
    """``derive``'s reading of the blob ``digest`` when it is of ``kind``, else None.
    Raises VerificationError for a malformed digest, as reading the blob would."""
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise VerificationError(run.path, f"{what} {digest!r} is not a blob digest", line)
    got = b.reading(digest).derived
    return got if got is not None and got[0] in kind else None


def _check_estimate(b: _Step, run: Run, line: int, body: dict, estimate: int, max_tokens: int) -> int:
    """Checks the prompt estimate; returns the simulator's prompt token count of the request."""
    known = _derived(b, run, body.get("request"), line, "request", ("r",))
    if known is not None:
        _, request_max, got, sim = known[:4]
        if request_max != max_tokens:
            raise VerificationError(run.path, f"call: request max_tokens {request_max!r} "
                                    f"!= params.max_tokens {max_tokens}", line)
        if got != estimate:
            raise VerificationError(run.path, f"call: prompt_estimate {estimate}, recomputed from the "
                                    f"request {got}", line)
        return sim
    request = _json_blob(b, run, line, body.get("request"), "request")
    messages = request.get("messages") if isinstance(request, dict) else None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise VerificationError(run.path, "call: the request blob holds no message list", line)
    if request.get("max_tokens") != max_tokens:
        raise VerificationError(run.path, f"call: request max_tokens {request.get('max_tokens')!r} "
                                f"!= params.max_tokens {max_tokens}", line)
    try:
        got = estimate_prompt_tokens(messages)
        sim = sim_prompt_tokens(messages)
    except RecursionError:
        raise VerificationError(run.path, "call: the request's messages nest too deeply", line) from None
    if got != estimate:
        raise VerificationError(run.path, f"call: prompt_estimate {estimate}, recomputed from the "
                                f"request {got}", line)
    return sim


def _json_blob(b: _Step, run: Run, line: int, digest, what: str):
    """Parsed JSON blob. Depth is bounded by the parser (orjson stops at 1024, the stdlib
    fallback's RecursionError is a ValueError); only the message list is walked after."""
    data = _blob(b, run, digest, line, what)
    try:
        obj = jsonio.loads(data)
    except ValueError as e:
        raise VerificationError(object_path(digest), f"{what} blob is not JSON ({e})") from None
    return obj


def _check_usage(b: _Step, run: Run, line: int, body: dict, sim: int | None) -> tuple[Usage | None, tuple]:
    """The call's usage, checked, and what of its raw usage is not read (``read_usage``)."""
    recorded = body.get("usage")
    want, unread = None, ()
    if body.get("usage_raw") is not None:
        want, unread = _normalised(b, run, line, body["usage_raw"])
    if (want.to_dict() if want else None) != recorded:
        raise VerificationError(run.path, f"call usage {recorded} differs from the raw usage "
                                f"normalised: {want.to_dict() if want else None}", line)
    rid = body.get("response_id")
    if want is not None and run.start.get("provider") == "sim" and isinstance(rid, str) and rid.startswith(_SIM_ID):
        _simulated_usage(b, run, line, body, want, sim)
    return want, (unread if want is not None else ())


_SIM_ID = "chatcmpl-sim-"  # the simulator's response ids (a scripted test provider has others)


def _simulated_usage(b: _Step, run: Run, line: int, body: dict, usage: Usage, sim: int | None) -> None:
    """A simulated call's usage follows from its request and reply by the simulator's token
    rule (FORMAT.md §6): a provider's can only be taken on trust, the simulator's cannot.
    Under a recorded profile, its reasoning and cache numbers follow too (``_simusage``)."""
    _simulated_counts(b, run, line, body, usage, sim)
    check_simulated_usage(b, run, line, body, usage)


def _simulated_counts(b: _Step, run: Run, line: int, body: dict, usage: Usage, sim: int | None) -> None:
    if sim is not None and usage.prompt != sim:
        raise VerificationError(run.path, f"simulated call: usage prompt {usage.prompt}, the simulator "
                                f"counts {sim} tokens in the request", line)
    if body.get("finish_reason") == "length":
        if usage.completion != (body.get("params") or {}).get("max_tokens"):
            raise VerificationError(run.path, "simulated call cut off at max_tokens: usage completion "
                                    f"{usage.completion} is not max_tokens", line)
        return
    n = _reply_chars(b, run, body.get("reply"), line)
    if n is None:
        return
    text = (n + 3) // 4
    if usage.completion < text or (usage.reasoning and usage.completion - usage.reasoning != text):
        raise VerificationError(run.path, f"simulated call: usage completion {usage.completion} "
                                f"(reasoning {usage.reasoning}) does not fit a reply of {n} characters "
                                f"({text} tokens by the simulator's rule)", line)


def _reply_chars(b: _Step, run: Run, reply, line: int) -> int | None:
    """A reply's length in characters (None when its bytes are not UTF-8); 0 for no reply."""
    if reply is None:
        return 0
    if not isinstance(reply, str) or not DIGEST_RE.match(reply):
        raise VerificationError(run.path, f"reply {reply!r} is not a blob digest", line)
    text = b.reading(reply).text
    return len(text) if text is not None else _chars(_blob(b, run, reply, line, "reply"))


def _normalised(b: _Step, run: Run, line: int, digest) -> tuple[Usage | None, tuple]:
    """The raw usage blob normalised, and what of it is not read: the reading stage's
    reading of it, else the blob read, once per blob (step 2 tied its bytes to its digest)."""
    known = _derived(b, run, digest, line, "usage_raw", ("u",))
    if known is not None:
        return None if known[1] is None else Usage(**known[1]), tuple(known[3])
    key = ("usage", digest)
    got = b.cache.get(key)
    if got is None:
        data = _blob(b, run, digest, line, "usage_raw")
        try:
            got = read_usage(jsonio.loads(data))
        except (BenchClawError, ValueError, TypeError):
            got = (None, ())  # kept raw, costed as unknown (FORMAT.md "Catalogs", usage shapes)
        b.cache[key] = got
    return got


def _totals(run: Run, calls: int, usages: list[Usage], total: CostBounds) -> None:
    end, last = run.end, run.count
    usage = sum_usage(usages).to_dict()
    if end.get("calls") != calls:
        raise VerificationError(run.path, f"run.end calls={end.get('calls')!r}, the run holds {calls}", last)
    if end.get("usage") != usage:
        got = end.get("usage")
        diff = [k for k in USAGE_FIELDS if not isinstance(got, dict) or got.get(k) != usage[k]]
        raise VerificationError(run.path, f"run.end usage {got} differs from the sum over calls "
                                f"{usage} ({', '.join(diff) or 'fields'})", last)
    if end.get("cost") != total.to_dict():
        raise VerificationError(run.path, f"run.end cost {end.get('cost')} differs from the sum "
                                f"over calls {total.to_dict()}", last)
