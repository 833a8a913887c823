"""One error base for everything BenchClaw reports to a user.

Library code raises a subclass carrying the user's text (naming the file, line or field
at fault); the CLI catches ``BenchClawError`` in one place and turns it into a message
and an exit code. Anything else is a bug and shows a traceback only with ``--verbose``.

Exit codes: 0 success, 1 a check or a verification failed (evidence does not match),
2 usage error or unreadable input.
"""

from __future__ import annotations

__all__ = [
    "BenchClawError",
    "UsageError",
    "InputError",
    "FormatError",
    "StorageError",
    "IntegrityError",
    "CheckFailed",
    "BudgetError",
    "ProviderConfigError",
    "RegistrationError",
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class BenchClawError(Exception):
    """Base of every error meant for a user. ``str(err)`` is the whole message."""

    exit_code = EXIT_USAGE


class UsageError(BenchClawError):
    """The command was called with arguments that cannot work."""


class InputError(BenchClawError):
    """An input file or folder is missing or unreadable (names the path)."""


class FormatError(InputError):
    """A file exists but does not follow its format (names the file, line or field)."""


class StorageError(InputError):
    """The runs directory could not be written (disk full, read-only, permissions).

    The message names the file and says what is safe; nothing written before is lost.
    """


class IntegrityError(BenchClawError):
    """Evidence does not match: a digest, a hash chain, a recomputed value."""

    exit_code = EXIT_FAILED


class CheckFailed(BenchClawError):
    """An acceptance check or verification step failed (exit 1)."""

    exit_code = EXIT_FAILED


class BudgetError(BenchClawError):
    """A ledger refused a call: its worst case could pass a budget limit."""

    exit_code = EXIT_FAILED


class ProviderConfigError(BenchClawError):
    """A provider or catalog is configured so that it cannot run (unknown price, no key)."""


class RegistrationError(BenchClawError):
    """An experiment is unregistered, or its spec changed since registration."""
