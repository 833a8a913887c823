"""The standalone offline verifier: ``benchclaw-verify bundle.zip``.

It reads a bundle without extracting it and without network, and recomputes everything
the bundle claims (see ``verifier.py`` for the numbered steps and docs/verify.md for what
that proves and what it does not). It imports only the standard library, ``orjson``
(through ``benchclaw.formats.jsonio``, with a stdlib fallback) and BenchClaw's pure modules:
never the providers, the agent, the runner, the store's writer side or the site
(``tests/test_boundaries.py`` enforces it).
"""

from ._errors import UnreadableBundle, VerificationError
from ._report import Section, VerifyReport
from ._zip import Limits
from .verifier import verify_bundle

__all__ = ["verify_bundle", "VerifyReport", "Section", "VerificationError", "UnreadableBundle",
           "Limits"]
