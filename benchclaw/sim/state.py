"""What a simulated model knows: only the messages it is sent.

A real model sees the conversation and nothing else, so the simulator rebuilds its whole
state from the request's messages on every call, like a stateless HTTP endpoint: the task
prompt and workspace listing from the first user message, which actions the system prompt
offers, and, from each (own reply, runtime observation) pair that follows, the files it has
read, what it wrote, and the check results it saw. Nothing is kept between calls, which is
what makes "same seed, same messages: same bytes out" hold by construction.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

__all__ = ["ConvState", "parse_conversation", "parse_action", "offers_check"]

_CHECK_OFFER = re.compile(r"""["']action["']\s*:\s*["']check["']""")


def offers_check(system: str) -> bool:
    """Does the system prompt offer the ``check`` action (``{"action": "check"}``)?"""
    return bool(_CHECK_OFFER.search(system or ""))


def parse_action(content: Any) -> dict | None:
    """A reply as the runtime would read it: one JSON object with a string ``action``, or
    ``None`` (prose around it, not JSON, not an object)."""
    if not isinstance(content, str):
        return None
    try:
        obj = json.loads(content.strip())
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) and isinstance(obj.get("action"), str) else None


def _observation(content: Any) -> dict:
    if not isinstance(content, str):
        return {}
    try:
        obj = json.loads(content)
    except (ValueError, RecursionError):
        return {}
    return obj if isinstance(obj, dict) else {}


@dataclass
class ConvState:
    """What the conversation so far tells the simulated model."""

    system: str
    prompt: str
    readable: list[str]
    writable: list[str]
    checks_offered: bool
    docs: dict[str, str] = field(default_factory=dict)          # path -> content, read order
    failed_reads: set[str] = field(default_factory=set)
    emitted: list[dict] = field(default_factory=list)            # every valid action it sent
    written: dict[str, str] = field(default_factory=dict)         # path -> last content written
    denied_writes: set[str] = field(default_factory=set)
    writes_since_check: set[str] = field(default_factory=set)
    failed_rounds: int = 0                                        # check results with a failure
    last_check_passed: bool | None = None
    checked_since_write: bool = False
    turns: int = 0

    def _apply(self, action: dict | None, obs: dict) -> None:
        self.turns += 1
        if action is None:
            return  # the runtime refused the reply; nothing happened
        self.emitted.append(action)
        handler = _HANDLERS.get(action.get("action"))
        if handler is not None:
            handler(self, action, obs)


def _on_read(st: ConvState, action: dict, obs: dict) -> None:
    path = action.get("path")
    if not isinstance(path, str):
        return
    if obs.get("ok") is True and isinstance(obs.get("content"), str):
        st.docs[path] = obs["content"]
    else:
        st.failed_reads.add(path)


def _on_write(st: ConvState, action: dict, obs: dict) -> None:
    path = action.get("path")
    if not isinstance(path, str):
        return
    if obs.get("ok") is True:
        st.written[path] = action.get("content") if isinstance(action.get("content"), str) else ""
        st.writes_since_check.add(path)
        st.checked_since_write = False
    else:
        st.denied_writes.add(path)


def _on_check(st: ConvState, action: dict, obs: dict) -> None:
    results = obs.get("results")
    if obs.get("ok") is not True or not isinstance(results, list):
        return
    passed = all(isinstance(r, dict) and r.get("passed") is True for r in results)
    st.last_check_passed = passed
    st.checked_since_write = True
    if not passed:
        st.failed_rounds += 1
        st.writes_since_check = set()


_HANDLERS: dict[str, Callable[[ConvState, dict, dict], None]] = {
    "read": _on_read, "write": _on_write, "check": _on_check,
}


def parse_conversation(messages: Sequence[Mapping], parse_workspace: Callable[[str], tuple]) -> ConvState:
    """Rebuild the state from ``messages``. Raises ``ValueError`` when there is no user
    message (a request a model could not act on)."""
    system = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        raise ValueError("the request has no user message")
    first = users[0]
    prompt = str(messages[first].get("content") or "")
    try:
        readable, writable = parse_workspace(prompt)
    except Exception:  # no or unreadable workspace section: a task it can only give up on
        readable, writable = [], []
    st = ConvState(system=system, prompt=prompt, readable=list(readable), writable=list(writable),
                   checks_offered=offers_check(system))
    rest = list(messages[first + 1:])
    for i, m in enumerate(rest):
        if m.get("role") != "assistant":
            continue
        obs = rest[i + 1] if i + 1 < len(rest) and rest[i + 1].get("role") == "user" else None
        st._apply(parse_action(m.get("content")), _observation(obs.get("content")) if obs else {})
    return st
