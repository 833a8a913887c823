"""BenchClaw: measure which model tier is good enough for an agent task, and which
routing policy is cheapest at the pass rate you need, with verifiable evidence.

Importing the package is cheap on purpose: heavy dependencies (``openai``, ``jinja2``)
are imported only by the modules that use them, so ``benchclaw --help`` starts fast.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
