"""A provider that answers every turn with a huge reply: do requests, blobs and time stay bounded?

One agent run (``direct`` profile, the small test task) through the ``openai`` provider against
``tests.hostile_server`` on loopback, which answers every call with ``--mb`` megabytes of
text that is not an action, until the run's turns or its ``--seconds`` run out. Before issue
13 each reply went back into the conversation whole, so request ``k`` carried ``k`` copies.

    python bench/huge_reply.py --mb 50 --seconds 5

Last line: ``huge_reply mb=M turns=T calls=C max_request_mb=R blobs_mb=B elapsed_s=E status=S``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=50)
    ap.add_argument("--seconds", type=int, default=5)
    args = ap.parse_args()

    from benchclaw.agent import load_profile, run_agent
    from benchclaw.agent.testing import make_task
    from benchclaw.formats.catalog import parse_catalog
    from benchclaw.providers import make_provider
    from benchclaw.evidence.store import Store
    from tests.hostile_server import completion, hostile

    text = "not an action " * int(args.mb * 1_000_000 / 14)
    usage = {"prompt_tokens": 100, "completion_tokens": 20}
    with tempfile.TemporaryDirectory() as tmp, hostile([], completion(text, usage=usage)) as srv:
        cat = parse_catalog((f'v = 1\nname = "b"\n[tiers.t]\nprovider = "openai"\nmodel = "real/model"\n'
                             f'base_url = "{srv.base_url}"\nprices = {{ input = "1", output = "2" }}\n').encode(), "b")
        store = Store(Path(tmp) / "runs", fsync=False)
        provider = make_provider(cat.tier("t"))

        async def go():
            try:
                return await run_agent(store=store, task=make_task(), tier="t", catalog=cat,
                                       profile=load_profile("direct"), seed=1, provider=provider,
                                       limits={"seconds": args.seconds})
            finally:
                await provider.aclose()

        t0 = time.monotonic()
        res = asyncio.run(go())
        elapsed = time.monotonic() - t0
        biggest = max(len(json.dumps(r["body"])) for r in srv.requests)
        blobs = sum(p.stat().st_size for p in (Path(tmp) / "runs" / "objects").rglob("*") if p.is_file())
        print(f"huge_reply mb={args.mb:g} turns={res.turns} calls={res.calls} max_request_mb={biggest / 1e6:.2f} "
              f"blobs_mb={blobs / 1e6:.1f} elapsed_s={elapsed:.2f} status={res.status}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
