"""Agent profiles: data files, not code (docs/FORMAT.md "Agent profiles").

A profile is what differs between two ways of running the same model on the same task:
the system prompt, which actions the runtime offers, and a turn limit. Keeping it in a
TOML file means a new profile is a new file, not a code change, and a run can record the
exact bytes it ran with (``digest``; the runtime stores the bytes as a blob). Shipped
profiles live in ``benchclaw/data/profiles/<name>.toml``; any other path works too.

The loader checks the prompt against the offered actions (each offered action is shown to
the model as ``"action": "<name>"`` and no other action is), because a prompt that
advertises an action the runtime refuses wastes turns in a way nobody would notice.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..errors import FormatError, InputError
from ..paths import package_data_dir
from .protocol import ACTIONS

__all__ = ["Profile", "load_profile", "parse_profile", "shipped_profiles", "PROFILE_KEYS"]

PROFILE_KEYS = {"v": int, "name": str, "description": str, "actions": list, "max_turns": int,
                "system_prompt": str}
_REQUIRED = ("v", "name", "actions", "max_turns", "system_prompt")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MAX_TURNS_CAP = 1000


@dataclass(frozen=True)
class Profile:
    """A loaded profile. ``digest`` is ``sha256:`` of ``source_bytes`` (the file as read)."""

    name: str
    system_prompt: str
    actions: tuple[str, ...]
    max_turns: int
    digest: str
    source_bytes: bytes = b""
    description: str = ""
    path: str | None = None


def _profiles_dir() -> Path:
    return package_data_dir() / "profiles"


def shipped_profiles() -> list[str]:
    """Names of the profiles that ship with BenchClaw."""
    return sorted(p.stem for p in _profiles_dir().glob("*.toml"))


def _check_keys(data: dict, where: str) -> None:
    for key in data:
        if key not in PROFILE_KEYS:
            raise FormatError(f"{where}: unknown key '{key}'")
    for key in _REQUIRED:
        if key not in data:
            raise FormatError(f"{where}: missing key '{key}'")
    for key, typ in PROFILE_KEYS.items():
        if key in data and (type(data[key]) is not typ):
            raise FormatError(f"{where}: '{key}' must be a {typ.__name__}")
    if data["v"] != 1:
        raise FormatError(f"{where}: unknown profile version v = {data['v']} (this BenchClaw reads v = 1)")


def _check_actions(actions: list, prompt: str, where: str) -> tuple[str, ...]:
    if not all(isinstance(a, str) for a in actions) or len(set(actions)) != len(actions):
        raise FormatError(f"{where}: 'actions' must be a list of distinct action names")
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown:
        raise FormatError(f"{where}: unknown action '{unknown[0]}' in 'actions' (known: {', '.join(ACTIONS)})")
    for needed in ("write", "finish"):
        if needed not in actions:
            raise FormatError(f"{where}: 'actions' must include '{needed}' (a run needs it to produce anything)")
    for a in ACTIONS:
        shown = f'"action": "{a}"' in prompt
        if shown != (a in actions):
            what = "shows the action" if shown else "does not show the offered action"
            raise FormatError(f"{where}: 'system_prompt' {what} '{a}' (write it as \"action\": \"{a}\")")
    return tuple(a for a in ACTIONS if a in actions)


def parse_profile(data_bytes: bytes, where: str) -> Profile:
    """Parse the bytes of a profile file. Raises ``FormatError`` naming ``where`` and the key."""
    try:
        data = tomllib.loads(data_bytes.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise FormatError(f"{where}: not a readable TOML file ({e})") from None
    _check_keys(data, where)
    if not _NAME_RE.match(data["name"]):
        raise FormatError(f"{where}: 'name' must be lower-case letters, digits, '-' or '_'")
    if not 1 <= data["max_turns"] <= MAX_TURNS_CAP:
        raise FormatError(f"{where}: 'max_turns' must be between 1 and {MAX_TURNS_CAP}")
    prompt = data["system_prompt"].strip()
    if not prompt:
        raise FormatError(f"{where}: 'system_prompt' is empty")
    actions = _check_actions(data["actions"], prompt, where)
    return Profile(name=data["name"], system_prompt=prompt, actions=actions, max_turns=data["max_turns"],
                   digest="sha256:" + hashlib.sha256(data_bytes).hexdigest(), source_bytes=data_bytes,
                   description=data.get("description", ""), path=where)


def _resolve(name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    if _NAME_RE.match(text) and not Path(text).is_file():
        path = _profiles_dir() / f"{text}.toml"
        if not path.is_file():
            raise InputError(f"no agent profile named '{text}' (shipped: {', '.join(shipped_profiles())}; "
                             "or give the path of a profile file)")
        return path
    path = Path(text)
    if not path.is_file():
        raise InputError(f"agent profile file not found: {path}")
    return path


def load_profile(name_or_path: str | Path) -> Profile:
    """A shipped profile by name (``direct``, ``checker``) or a profile file by path.

    Raises ``InputError`` when there is no such profile or file, ``FormatError`` (naming the
    file and key) when the file is not a valid profile.
    """
    path = _resolve(name_or_path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read agent profile {path}: {e.strerror}") from None
    return parse_profile(data, str(path))
