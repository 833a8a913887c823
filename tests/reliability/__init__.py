"""End-to-end reliability suites (issue #10): faults, crashes, injections, secrets, disk.

Each suite drives the whole pipeline (prereg -> grid -> report -> site -> bundle -> verify)
through the public library entry points and asserts what a user would notice when
something goes wrong. Figures each suite reaches are listed in docs/RELIABILITY.md; set
``BENCHCLAW_RELIABILITY_FIGURES=<file.jsonl>`` to have the suites append them.
"""
