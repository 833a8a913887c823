"""Formats: the pure definitions of what BenchClaw writes and reads (records, money,
names, catalogs, specs, stopping rules, ledgers, policies). Standard library and
``orjson`` only: the verifier imports these, so nothing here touches the disk's state,
the network or the clock. Import the modules themselves; this file re-exports nothing.
"""
