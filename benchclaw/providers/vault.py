"""The key vault: where the API key lives, and the filter that keeps it from leaking.

The key is read once (from the catalog's environment variable, or a file) into a
``Secret``. Only a provider opens it, at the moment it builds the ``Authorization``
header; it is never a tool, never in a prompt, a record, a blob, a log line, an exception
text, a report, a site page or a bundle.

What the in-memory obfuscation does and does not protect. The key is kept XOR-ed with a
random pad of the same length (``os.urandom``), both held by the ``Secret``. That stops
accidental disclosure: the plain key is not an attribute anyone can print, ``repr``,
``str`` and ``format`` show ``<redacted>``, pickling and copying are refused, and a memory
scan for the key's bytes does not find it at rest. It does not stop code running in the
same process from calling ``reveal`` (Python has no private memory), nor a core dump
taken while a request is in flight (the SDK holds the plain header briefly), nor an
attacker who can read both the pad and the masked bytes. It is hygiene, not a sandbox.
AES-GCM would add nothing here: its key would sit in the same process beside the data.

What is a secret. A key counts as a secret when it has at least ``MIN_SECRET_LEN`` (12)
characters, mixes at least two of lower-case letters, upper-case letters and digits, and
is not a known placeholder (``PLACEHOLDERS``: ``EMPTY``, ``sk-no-key-required``, ``none``,
…). Local servers (vLLM, llama.cpp, Ollama) accept any bearer token and their docs tell
users to pass such a word; it protects nothing, and treating it as a secret would remove
ordinary words ("EMPTY", "required") from the evidence. ``Secret.is_secret`` says which.

Where redaction applies, and what it never touches. ``redact(text)`` replaces each whole
occurrence of a live secret, and each run of at least ``fragment_len(key)`` of its
characters (half the key, at least 16: an echo cut short by one character is still the
key), with ``[REDACTED]``. It is applied only to strings a provider could have echoed the
key into: error messages and bodies, headers, and provider strings (``finish_reason``,
``model``, ids, the raw usage object). Model content is never passed through it: content,
artifacts and everything a check judges stay exactly as the model produced them. A reply
whose content does carry a whole secret is a provider fault instead
(``contains_secret``; the runtime records it as an error of kind ``key_echo``, stores the
content with ``KEY_MARK`` in place of the key and never acts on it; see FORMAT.md §3).
``RedactingFilter`` does the same for log records of the SDK and its HTTP client.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from pathlib import Path

from ..errors import ProviderConfigError

__all__ = ["Secret", "redact", "RedactingFilter", "install_log_redaction", "REDACTED", "load_key", "tier_key",
           "KEY_ENVS_VAR", "KNOWN_KEY_HOSTS", "is_secret", "contains_secret", "mark_secrets", "KEY_MARK",
           "PLACEHOLDERS", "fragment_len"]

REDACTED = "[REDACTED]"
# What replaces a key a provider sent back inside model content: visible, and not a word
# a model writes by accident. The call carrying it is an error of kind ``key_echo``.
KEY_MARK = "[BENCHCLAW: API KEY ECHOED BY THE PROVIDER, REMOVED]"
MIN_SECRET_LEN = 12
MIN_FRAGMENT = 16
# Tokens local OpenAI-compatible servers document as "any key": not secrets (compared
# case-insensitively).
PLACEHOLDERS = frozenset({"empty", "none", "null", "sk-no-key-required", "no-key-needed", "no-key", "dummy",
                          "sk-dummy", "ollama", "lm-studio", "not-needed", "sk-xxx", "sk-1234", "token-abc123",
                          "changeme", "placeholder", "test", "api-key", "your-api-key"})

_LIVE: "weakref.WeakSet[Secret]" = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


class Secret:
    """An API key held masked in memory. ``reveal()`` is for providers only."""

    __slots__ = ("_pad", "_masked", "_label", "__weakref__")

    def __init__(self, value: str, label: str = "key") -> None:
        if not isinstance(value, str) or not value.strip():
            raise ProviderConfigError(f"{label}: the API key is empty")
        raw = value.strip().encode("utf-8")
        pad = os.urandom(len(raw))
        self._pad = pad
        self._masked = bytes(a ^ b for a, b in zip(raw, pad))
        self._label = label
        with _LIVE_LOCK:
            _LIVE.add(self)

    @classmethod
    def from_env(cls, var: str) -> "Secret":
        """Read the key from environment variable ``var``. Raises ``ProviderConfigError``
        naming the variable (never its value) when it is unset or empty."""
        value = os.environ.get(var)
        if not value or not value.strip():
            raise ProviderConfigError(f"environment variable {var} is not set: it must hold the API key")
        return cls(value, label=var)

    @classmethod
    def from_file(cls, path: str | Path) -> "Secret":
        """Read the key from the first line of a file. Raises ``ProviderConfigError``."""
        p = Path(path).expanduser()
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ProviderConfigError(f"{p}: cannot read the key file ({type(e).__name__})") from None
        line = text.strip().splitlines()[0] if text.strip() else ""
        return cls(line, label=str(p))

    @property
    def is_secret(self) -> bool:
        """Whether redaction protects this key (see the module docstring)."""
        return is_secret(self.reveal())

    @property
    def label(self) -> str:
        """Where the key came from (a variable or file name, never the value)."""
        return self._label

    def reveal(self) -> str:
        """The plain key. Call it only where the request header is built."""
        return bytes(a ^ b for a, b in zip(self._masked, self._pad)).decode("utf-8")

    def __repr__(self) -> str:
        return f"Secret(<redacted {self._label}>)"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __reduce__(self):
        raise TypeError("a Secret cannot be pickled")

    def __copy__(self):
        raise TypeError("a Secret cannot be copied")

    def __deepcopy__(self, memo):
        raise TypeError("a Secret cannot be copied")

    def __eq__(self, other) -> bool:
        return self is other

    __hash__ = object.__hash__


def load_key(key_env: str | None, key_file: str | None = None) -> Secret | None:
    """The key of a tier: from ``key_file`` when given, else from ``key_env``; ``None`` when
    the tier needs no key. Raises ``ProviderConfigError`` when a configured source is empty."""
    if key_file:
        return Secret.from_file(key_file)
    if key_env:
        return Secret.from_env(key_env)
    return None


# -- which key may go where (a catalog is untrusted input: FORMAT.md "Catalogs") --------

KEY_ENVS_VAR = "BENCHCLAW_KEY_ENVS"  # the user's own extra key variables, comma-separated
# Well-known provider keys go only to their provider's hosts (a name or a ".suffix").
KNOWN_KEY_HOSTS = {"OPENAI_API_KEY": ("api.openai.com",),
                   "NEBIUS_API_KEY": (".nebius.com", ".nebius.ai")}
KEY_FILE_SUFFIX = ".key"


def tier_key(tier) -> Secret | None:
    """The key an ``openai`` tier sends, read under the rules that make a shared catalog safe
    to use; ``None`` when the tier names no key source. Raises ``ProviderConfigError`` naming
    the tier when:

    - the key would go to a host other than the one named next to the key source (a catalog
      that ``extends`` another and moves its base_url must name the key source again);
    - it would go over plain HTTP to a host that is not loopback, unless the tier says
      ``allow_http = true``;
    - ``key_env`` is neither a ``BENCHCLAW_…KEY`` variable, nor a well-known provider key sent
      to that provider's host, nor listed by the user in ``BENCHCLAW_KEY_ENVS``;
    - ``key_file`` (relative paths resolve against the catalog's folder) is not a ``*.key`` file;
    - the source is unset, empty or unreadable.
    """
    if not tier.key_env and not tier.key_file:
        return None
    where = f"tier {tier.name!r}"
    host = _host(tier.base_url)
    if tier.key_url is not None and _host(tier.key_url) != host:
        raise ProviderConfigError(f"{where}: its key source was named for host {_host(tier.key_url)!r} but "
                                  f"base_url now points at {host!r}; name key_env/key_file again next to "
                                  "this base_url")
    if str(tier.base_url).lower().startswith("http://") and not _loopback(host) and not tier.allow_http:
        raise ProviderConfigError(f"{where}: refusing to send its key over plain HTTP to {host!r}; use https, "
                                  "a loopback host, or set allow_http = true in the tier if you mean it")
    try:
        if tier.key_file:
            if not Path(tier.key_file).name.endswith(KEY_FILE_SUFFIX):
                raise ProviderConfigError(f"key_file {tier.key_file!r} is not a *{KEY_FILE_SUFFIX} file; "
                                          "only such files may hold a key")
            return Secret.from_file(tier.key_file)
        _check_key_env(tier.key_env, host)
        return Secret.from_env(tier.key_env)
    except ProviderConfigError as e:
        raise ProviderConfigError(f"{where}: {e}") from None


def _check_key_env(var: str, host: str) -> None:
    allowed = {v.strip() for v in os.environ.get(KEY_ENVS_VAR, "").split(",") if v.strip()}
    if var in allowed or (var.startswith("BENCHCLAW_") and var.endswith("KEY")):
        return
    hosts = KNOWN_KEY_HOSTS.get(var)
    if hosts is not None:
        if any(host == h or (h.startswith(".") and host.endswith(h)) for h in hosts):
            return
        raise ProviderConfigError(f"key_env {var} may only be sent to {', '.join(hosts)}, not {host!r} "
                                  f"(add {var} to {KEY_ENVS_VAR} to allow it)")
    raise ProviderConfigError(f"key_env {var} is not a key variable BenchClaw reads: use a variable named "
                              f"BENCHCLAW_…KEY, or list {var} in {KEY_ENVS_VAR}")


def _host(url: str | None) -> str:
    from urllib.parse import urlsplit

    try:
        return (urlsplit(url or "").hostname or "").lower()
    except ValueError:
        return ""


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_secret(value: str) -> bool:
    """A key worth protecting: at least ``MIN_SECRET_LEN`` characters, at least two of
    lower-case, upper-case and digits, and not a known placeholder."""
    if not isinstance(value, str) or len(value) < MIN_SECRET_LEN or value.lower() in PLACEHOLDERS:
        return False
    classes = (any(c.islower() for c in value), any(c.isupper() for c in value), any(c.isdigit() for c in value))
    return sum(classes) >= 2


def _live_keys() -> list[str]:
    with _LIVE_LOCK:
        if not _LIVE:  # no key loaded (the simulator): every provider string passes this
            return []
        secrets = list(_LIVE)
    return [k for k in (s.reveal() for s in secrets) if is_secret(k)]


def fragment_len(key: str) -> int:
    """The shortest run of a key's characters that ``redact`` treats as the key."""
    return max(MIN_FRAGMENT, (len(key) + 1) // 2)


def _fragment_mask(text: str, key: str) -> list[bool]:
    """Mark every character of ``text`` covered by a run of >= ``fragment_len`` key characters."""
    n = fragment_len(key)
    grams = {key[i:i + n] for i in range(len(key) - n + 1)}
    mask = [False] * len(text)
    for i in range(len(text) - n + 1):
        if text[i:i + n] in grams:
            for j in range(i, i + n):
                mask[j] = True
    return mask


def _redact_one(text: str, key: str) -> str:
    text = text.replace(key, REDACTED)
    if len(key) < fragment_len(key):
        return text
    mask = _fragment_mask(text, key)
    if not any(mask):
        return text
    out, i = [], 0
    while i < len(text):
        if mask[i]:
            while i < len(text) and mask[i]:
                i += 1
            out.append(REDACTED)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def redact(text: str, keys: list[str] | None = None) -> str:
    """``text`` with every live secret (or each of ``keys`` that is a secret) replaced by
    ``[REDACTED]``, whole or as a run of ``fragment_len`` of its characters. For provider
    strings only, never model content. Never raises for a string."""
    if not isinstance(text, str):
        text = str(text)
    for key in sorted(keys if keys is not None else _live_keys(), key=len, reverse=True):
        if key and is_secret(key):
            text = _redact_one(text, key)
    return text


def contains_secret(text: str | None, keys: list[str] | None = None) -> bool:
    """Whether ``text`` holds a whole live secret (a provider echoing the key into content)."""
    if not text:
        return False
    return any(k in text for k in (keys if keys is not None else _live_keys()) if is_secret(k))


def mark_secrets(text: str, keys: list[str] | None = None) -> str:
    """``text`` with every whole live secret replaced by ``KEY_MARK`` (the stored form of
    a reply that carried the key; the call is a ``key_echo`` error, never acted on)."""
    for key in sorted(keys if keys is not None else _live_keys(), key=len, reverse=True):
        if key and is_secret(key):
            text = text.replace(key, KEY_MARK)
    return text


class RedactingFilter(logging.Filter):
    """A logging filter that redacts live keys from a record's message and arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        keys = _live_keys()
        if keys:
            try:
                message = record.getMessage()
            except Exception:  # a broken format string: keep the raw template only
                message = str(record.msg)
            record.msg = redact(message, keys)
            record.args = None
        return True


_FILTER = RedactingFilter()
_PREFIXES = ("openai", "httpx", "httpcore")


def install_log_redaction() -> None:
    """Attach ``RedactingFilter`` to every logger of the SDK and its HTTP client that
    exists now (call it after importing them; idempotent). A filter on a logger applies to
    the records created there, so each of their loggers gets one."""
    names = [n for n in list(logging.Logger.manager.loggerDict) if n.split(".")[0].startswith(_PREFIXES)]
    for name in names + list(_PREFIXES):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
