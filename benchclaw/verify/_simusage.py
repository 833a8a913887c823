"""Step 4 for the built-in simulator's replies: their reasoning and cache numbers recomputed.

A run on the in-process simulator records in ``run.start.sim`` the profile it ran under and
the digest of the profiles file (a blob in the bundle). The simulator's usage is a
function of the request and that profile (docs/FORMAT.md §6, "Simulated usage", with the
rules in ``benchclaw.formats.sim_rules``, the module the simulator itself uses), so the raw usage
blob of every simulated reply must be exactly the one the simulator sends: the cache
split from the profile's cache rule, the reasoning tokens drawn from the profile for the
turn's kind with the request's noise, the completion the reasoning plus the reply's text.
A turn's kind is read from the reply's action (a planted lure's action is a ``read`` turn
whatever it names); an empty or unreadable reply leaves it unknown and any kind is
accepted (docs/verify.md). ``pinned_profiles`` is step 7's half: a registration that pins
a profiles file holds every in-process simulated run of it to that file.
"""

from __future__ import annotations

import hashlib
from itertools import chain
from typing import NamedTuple

from ..formats import jsonio
from ..errors import BenchClawError
from ..formats.money import Usage
from ..formats.records import DIGEST_RE
from ..formats.sim_rules import (Profile, action_kinds, cache_split_of, detect_family, effort_for,
                                 first_prompt, parse_profiles, prompt_tokens, reasoning_tokens,
                                 reported, sim_tokens, turn_noise, usage_raw, Streams)
from ._errors import VerificationError
from ._index import Run
from .manifest import object_path

__all__ = ["check_simulated_usage", "pinned_profiles"]


def pinned_profiles(run: Run, name: str, line: int, reg: dict) -> None:
    """A run on the in-process simulator used the profiles file its registration pinned."""
    if "sim_profiles" not in reg or run.start.get("provider") != "sim":
        return
    sim = run.start.get("sim")
    got = sim.get("profiles") if isinstance(sim, dict) else None
    if got != reg["sim_profiles"]:
        raise VerificationError(run.path, f"ran with simulator profiles {got}, the registration "
                                f"({name}:{line}) pinned {reg['sim_profiles']}", 1)


def check_simulated_usage(b, run: Run, line: int, body: dict, usage: Usage) -> None:
    """The call's raw usage is what the simulator sends for its request under the run's
    profile. Runs without ``run.start.sim`` (HTTP simulators, gateways, older runs) are
    left to the token-rule checks before this one."""
    rules = _rules(b, run)
    if rules is None:
        return
    try:
        _check(b, run, line, body, usage, *rules)
    except (ArithmeticError, ValueError, TypeError, RecursionError) as e:  # a hostile request or profile
        raise VerificationError(run.path, f"simulated call: cannot recompute its usage ({e})", line) from None


def _check(b, run: Run, line: int, body: dict, usage: Usage, profile: Profile, effort: dict) -> None:
    facts = request_facts(b, run, line, body)
    prompt = facts.prompt
    cached, written = cache_split_of(profile, facts.prefix, prompt)
    shown = reported(profile.usage_shape)
    where = f"simulated call (profile {profile.name})"
    if shown[0] and usage.cached_read != cached:
        raise VerificationError(run.path, f"{where}: usage cached_read {usage.cached_read}, the profile's cache "
                                f"rule gives {cached} (block {profile.cache_block}, min prefix "
                                f"{profile.cache_min_prefix})", line)
    if shown[1] and usage.cache_write != written:
        raise VerificationError(run.path, f"{where}: usage cache_write {usage.cache_write}, the profile's cache "
                                f"rule gives {written}", line)
    draws = _draws(b, run, line, body, profile, effort, facts)
    # the blob's usage (normalised from it) has a draw's numbers whenever the blob is that
    # draw's object, so only the draws its numbers match are built and hashed: the runtime
    # stores a raw usage as its canonical JSON, so the blob is the simulator's object exactly
    # when its digest is that object's (step 2 tied the blob to its digest); every number in
    # it is an int (counts checked or computed as such): no float to look for
    same = [(r, c) for r, c in draws.values() if c == usage.completion and (not shown[2] or r == usage.reasoning)]
    wants = [usage_raw(profile.usage_shape, prompt, cached, written, c, r) for r, c in same]
    raw = body.get("usage_raw")
    if any(raw == "sha256:" + hashlib.sha256(jsonio.dumps_floatless(w)).hexdigest() for w in wants):
        return
    if same:  # the numbers follow, the object around them does not
        raise VerificationError(run.path, f"{where}: the raw usage blob is not the {profile.usage_shape!r} usage "
                                f"object the simulator sends for these numbers: {wants[0]}", line)
    told = ", ".join(f"{k} {r} (completion {c})" for k, (r, c) in draws.items())
    got = f"reasoning {usage.reasoning}" if shown[2] else "reasoning not reported"
    raise VerificationError(run.path, f"{where}: usage {got}, completion {usage.completion}; the simulator "
                            f"draws for this request: {told}", line)


def _draws(b, run: Run, line: int, body: dict, profile: Profile, effort: dict,
           facts: "SimFacts") -> dict[str, tuple[int, int]]:
    """{turn kind: (reasoning, completion)} the simulator could have sent: one per kind the
    reply allows; a reply cut at max_tokens reports max_tokens for both."""
    max_tokens = (body.get("params") or {}).get("max_tokens")
    if body.get("finish_reason") == "length":
        return {"cut at max_tokens": (max_tokens, max_tokens)}
    content = _reply(b, run, line, body.get("reply"))
    z, family = facts.z, facts.family
    out = {}
    for kind in _kinds(b, content):
        r = reasoning_tokens(profile, kind, effort_for(effort, family) if kind == "write" else 1.0, z)
        out[kind] = (r, r + sim_tokens(content))
    return out


def _kinds(b, content: str) -> tuple[str, ...]:
    """``action_kinds``, once per reply text: a grid's runs send the same replies again (the
    texts are held by the index already, so the keys cost nothing more)."""
    key = ("action kinds", content)
    got = b.cache.get(key)
    if got is None:
        got = b.cache[key] = action_kinds(content)
    return got


def _rules(b, run: Run) -> tuple[Profile, dict] | None:
    """(profile, family effort table) of ``run.start.sim``; None without it. Read once per
    (profiles, catalog, tier, model): the runs of a grid share a few; its key is made once
    per run (the run's calls come one after another), not once per call."""
    last = b.cache.get("sim rules of")
    if last is not None and last[0] is run:
        key = last[1]
    else:
        start = run.start
        key = ("sim rules", b.key([start.get(k) for k in ("sim", "catalog", "tier", "model")]))
        b.cache["sim rules of"] = (run, key)
    if key not in b.cache:
        try:
            b.cache[key] = _read_rules(b, run)
        except VerificationError as e:  # kept, and told again in each run's name
            b.cache[key] = (e, run.path)
    got = b.cache[key]
    if got is not None and isinstance(got[0], VerificationError):
        e, first = got
        raise VerificationError(run.path if e.path == first else e.path, e.message, e.record)
    return got


def _read_rules(b, run: Run) -> tuple[Profile, dict] | None:
    sim = run.start.get("sim")
    if sim is None:
        return None
    digest = sim.get("profiles") if isinstance(sim, dict) else None
    if not isinstance(digest, str) or not DIGEST_RE.match(digest) or not isinstance(sim.get("profile"), str):
        raise VerificationError(run.path, "run.start.sim is not {profile, profiles: blob digest}", 1)
    try:
        profiles, effort = parse_profiles(b.ix.read(object_path(digest), run.path, 1), object_path(digest))
    except BenchClawError as e:
        raise VerificationError(object_path(digest), str(e).removeprefix(f"{object_path(digest)}: ")) from None
    profile = profiles.get(sim["profile"])
    want = _expected_profile(b, run, profiles)
    if profile is None or profile is not want:
        raise VerificationError(run.path, f"run.start.sim.profile {sim['profile']!r} is not the profile the "
                                f"simulator uses for tier {run.start.get('tier')!r} "
                                f"({want.name if want else 'none'})", 1)
    return profile, effort


def _expected_profile(b, run: Run, profiles: dict) -> Profile | None:
    """The catalog tier's ``sim_profile``, else the profile whose model (or name) is the
    run's model: how the in-process simulator picks it (FORMAT.md "Simulator profiles")."""
    try:  # step 4 (``b``) has parsed and confirmed this catalog already
        name = b.catalog(run).tier(str(run.start.get("tier"))).sim_profile
    except (BenchClawError, ValueError):
        name = None  # reported by the price check
    if name:
        return profiles.get(name)
    model = run.start.get("model")
    return next((p for p in profiles.values() if p.model == model), profiles.get(model))


class SimFacts(NamedTuple):
    """What the simulator's usage reads of a request (the same for every profile): its
    prompt tokens, those of all but its last two messages (the cached prefix), the turn's
    first noise draw and the task family of its first prompt."""

    prompt: int
    prefix: int
    z: float
    family: str | None


def sim_facts(request, whole: bytes | None = None, tokens: list[int] | None = None,
              strings: bool = False) -> list | None:
    """``SimFacts`` of a parsed request as JSON values (``z`` as ``float.hex``, exact), or
    None when it holds no model or message list. Pure: the reading stage takes it, passing
    what it has already made of the messages: ``whole``, the list's canonical bytes
    (``_costs.canon_list``), ``tokens``, each one's tokens (``_costs.message_tokens``), and
    ``strings``: every value of every message is a string (``_costs.request_counts``)."""
    messages = request.get("messages") if isinstance(request, dict) else None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages) \
            or not isinstance(request.get("model"), str):
        return None
    seed = request.get("seed") if isinstance(request.get("seed"), int) else 0
    z = _noise(seed, request["model"], messages, whole, strings).gauss(0.0, 1.0)  # the turn's first draw: its reasoning
    if tokens is None:
        prompt, prefix = prompt_tokens(messages), prompt_tokens(messages[:-2]) if len(messages) > 2 else 0
    else:
        prompt, prefix = 3 + sum(tokens), 3 + sum(tokens[:-2]) if len(messages) > 2 else 0
    return [prompt, prefix, z.hex(), _family(first_prompt(messages))]


def _noise(seed: int, model: str, messages: list, whole: bytes | None, strings: bool = False):
    """``turn_noise(seed, model, messages)``: its digest is of ``jsonio.dumps([seed, model,
    messages])``, which is the messages' ``whole`` framed by the seed's and model's bytes
    when no message holds a float (then both backends write the same bytes; ``strings``:
    the caller saw only strings in them); a float, or no bytes, goes the canonical way."""
    if whole is None or not (strings or _all_plain(messages)):
        return turn_noise(seed, model, messages)
    h = hashlib.sha256(b"[" + jsonio.dumps(seed) + b"," + jsonio.dumps(model) + b",")
    h.update(whole)
    h.update(b"]")
    return Streams(h.digest()).rng("noise")


def _all_plain(messages: list) -> bool:
    """No float in any message: every value a string (the types of all of them taken at
    once, at C speed), else each message looked at (``_plain``)."""
    if set(map(type, chain.from_iterable(map(dict.values, messages)))) <= _STR:
        return True
    return all(_plain(m) for m in messages)


_STR = frozenset({str})


def _plain(message: dict) -> bool:
    """No float in the message (a role and a content string: checked at once)."""
    return all(type(v) is str for v in message.values()) or not jsonio._has_float(message)


_FAMILIES: dict[str, str | None] = {}  # first prompt -> its family: a grid repeats a few prompts


def _family(prompt: str | None) -> str | None:
    """``detect_family`` once per prompt (the regular expressions cost more than the lookup);
    only short prompts are kept, and only so many, so a hostile bundle cannot grow it."""
    if prompt is None or len(prompt) > 16384:
        return detect_family(prompt)
    got = _FAMILIES.get(prompt, _FAMILIES)
    if got is _FAMILIES:
        got = detect_family(prompt)
        if len(_FAMILIES) < 256:
            _FAMILIES[prompt] = got
    return got


def request_facts(b, run: Run, line: int, body: dict) -> SimFacts:
    """The request's ``SimFacts``: the reading stage's, or (a request it could take no
    reading of) from the request blob itself."""
    digest = body.get("request")
    got = b.reading(digest).derived if isinstance(digest, str) and DIGEST_RE.match(digest) else None
    facts = got[6] if got is not None and got[0] == "r" and len(got) > 6 else None
    if facts is None:
        facts = sim_facts(_json(b, run, line, digest, "request"))
    if facts is None:
        raise VerificationError(run.path, "simulated call: the request blob holds no model or message list", line)
    prompt, prefix, z, family = facts
    return SimFacts(prompt, prefix, float.fromhex(z), family)


def _reply(b, run: Run, line: int, digest) -> str:
    if digest is None:
        return ""
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise VerificationError(run.path, f"reply {digest!r} is not a blob digest", line)
    text = b.reading(digest).text  # kept by the reading stage
    if text is not None:
        return text
    data = _blob(b, run, line, digest, "reply")
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise VerificationError(run.path, "simulated call: the reply blob is not UTF-8 text", line) from None


def _json(b, run: Run, line: int, digest, what: str):
    try:
        return jsonio.loads(_blob(b, run, line, digest, what))
    except ValueError as e:
        raise VerificationError(object_path(digest), f"{what} blob is not JSON ({e})") from None


def _blob(b, run: Run, line: int, digest, what: str) -> bytes:
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise VerificationError(run.path, f"{what} {digest!r} is not a blob digest", line)
    return b.ix.read(object_path(digest), run.path, line)
