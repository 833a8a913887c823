"""The model-to-runtime wire protocol: one JSON object naming one action per reply.

``parse_reply`` turns the text of a model reply into either an ``Action`` or an
``Invalid`` carrying the sentence the model is shown. It is pure and total: no reply, of
any size or shape, makes it raise, so the runtime's loop has exactly two cases.

Why strict: the reply is the only channel from the model to the runtime, so it must mean
one thing. Prose or code fences around the object, a second object, duplicate keys (which
JSON parsers resolve differently), a missing or mistyped field, an unknown action and an
action the profile does not offer are all refused with a reason, and the turn is spent.
Extra keys beside the required ones are ignored (models like to add a "reason"): they
cannot change what the action does. The raw reply is stored as a blob either way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Collection

__all__ = ["Action", "Invalid", "ACTIONS", "ACTION_FIELDS", "parse_reply", "MAX_REPLY_CHARS"]

# action -> (field, type) pairs it requires; the registry of the protocol.
ACTION_FIELDS: dict[str, tuple[tuple[str, type], ...]] = {
    "read": (("path", str),),
    "write": (("path", str), ("content", str)),
    "check": (),
    "finish": (("summary", str),),
}
ACTIONS = tuple(ACTION_FIELDS)
MAX_REPLY_CHARS = 1 << 20
_MAX_DEPTH = 32


@dataclass(frozen=True)
class Action:
    """A well-formed, offered action: ``name`` and its required fields in ``args``."""

    name: str
    args: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Invalid:
    """A reply that is not a valid action. ``reason`` is shown to the model; ``action`` is
    the action name the reply asked for, when it named one (kept to spot tool lures)."""

    reason: str
    action: str | None = None


class _Duplicate(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Duplicate(key)
        seen.add(key)
    return dict(pairs)


def _too_deep(obj: object, limit: int = _MAX_DEPTH) -> bool:
    stack = [(obj, 1)]
    while stack:
        cur, depth = stack.pop()
        if isinstance(cur, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (cur.values() if isinstance(cur, dict) else cur))
    return False


def _looks_wrapped(text: str) -> bool:
    """Is there a JSON object somewhere inside text that is not one as a whole?"""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return False
    try:
        json.loads(text[start:end + 1])
    except (ValueError, RecursionError):
        return False
    return True


# One decoder for every reply (``json.loads`` with a hook builds a new one per call).
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates)


def _decode(text: str) -> object | Invalid:
    try:
        if text.startswith("\ufeff"):  # as ``json.loads`` refuses it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        return _DECODER.decode(text)
    except RecursionError:
        return Invalid("invalid reply: JSON nested too deeply")
    except _Duplicate as e:
        return Invalid(f"invalid reply: duplicate key {str(e)[:64]!r} in the JSON object")
    except ValueError as e:
        if _looks_wrapped(text):
            return Invalid("invalid reply: prose or code fences around the JSON object; "
                           "reply with the JSON object only")
        return Invalid(f"invalid reply: not valid JSON ({str(e).split(':')[0][:200]})")


def _encodes(text: str) -> bool:
    """True when ``text`` is valid Unicode (no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _not_unicode(obj: object) -> bool:
    """True when a string in ``obj`` holds a lone surrogate (JSON allows ``"\\ud800"``)."""
    stack = [obj]
    while stack:
        cur = stack.pop()
        if isinstance(cur, str):
            try:
                cur.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(cur, dict):
            stack.extend(cur.keys())
            stack.extend(cur.values())
        elif isinstance(cur, list):
            stack.extend(cur)
    return False


def _check_fields(name: str, obj: dict) -> Invalid | None:
    for key, typ in ACTION_FIELDS[name]:
        if key not in obj:
            return Invalid(f"invalid reply: action '{name}' needs the field '{key}'", name)
        if not isinstance(obj[key], typ):
            return Invalid(f"invalid reply: field '{key}' of action '{name}' must be a "
                           f"{'string' if typ is str else typ.__name__}", name)
    return None


def parse_reply(content: str | None, offered: Collection[str]) -> Action | Invalid:
    """Parse one model reply against the actions ``offered`` by the profile. Never raises."""
    if content is None or content.strip() == "":
        return Invalid("invalid reply: empty reply; answer with one JSON object naming an action")
    if len(content) > MAX_REPLY_CHARS:
        return Invalid(f"invalid reply: longer than {MAX_REPLY_CHARS} characters")
    text = content.strip()
    obj = _decode(text)
    if isinstance(obj, Invalid):
        return obj
    if not isinstance(obj, dict):
        return Invalid(f"invalid reply: expected one JSON object, got a JSON {type(obj).__name__}")
    # Each walk below runs only when the text could hold what it looks for: a value nests no
    # deeper than the text has brackets, and a lone surrogate is either in the text itself
    # (it does not encode) or written as a ``\u`` escape (scans in C, each one pass).
    if text.count("{") + text.count("[") > _MAX_DEPTH and _too_deep(obj):
        return Invalid("invalid reply: JSON nested too deeply")
    if ("\\u" in text or not _encodes(text)) and _not_unicode(obj):
        return Invalid("invalid reply: a string holds a lone surrogate (not valid Unicode)")
    name = obj.get("action")
    if "action" not in obj:
        return Invalid("invalid reply: missing field 'action'")
    if not isinstance(name, str):
        return Invalid("invalid reply: field 'action' must be a string")
    offer = ", ".join(a for a in ACTIONS if a in offered)
    if name not in ACTION_FIELDS:
        return Invalid(f"invalid reply: unknown action '{name[:64]}' (offered: {offer})", name)
    if name not in offered:
        return Invalid(f"invalid reply: action '{name}' is not offered here (offered: {offer})", name)
    bad = _check_fields(name, obj)
    if bad is not None:
        return bad
    return Action(name, {key: obj[key] for key, _ in ACTION_FIELDS[name]})
