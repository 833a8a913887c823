"""One sealed run as the site sees it: a compact summary and the replay view.

Why it is built this way:
- The *summary* is a small JSON-able dict cached in the build manifest under the run id.
  A sealed run never changes, so index, list, cell, gallery and experiment pages are
  rebuilt from cached summaries without re-reading 10,000 run logs.
- The *view* holds everything the replay page shows, with every blob read at most once
  and every model-produced text bounded: a huge reply or artifact is cut at a fixed size
  and its full blob is linked (the builder copies linked blobs into ``site/objects/``).
- Records are read generically: an unknown kind is shown as its raw body, never dropped.
- A missing or altered blob does not stop the build: the page says so in place (the
  offline verifier is the authority on evidence; the site shows what is there).
"""

from __future__ import annotations

import difflib
import hashlib
import re

from ..formats import jsonio
from ..evidence.store import SealedRun, Store

__all__ = ["summarise_run", "run_view", "Blobs", "TEXT_LIMIT"]

TEXT_LIMIT = 16 * 1024      # bytes of a reply/observation shown inline
ARTIFACT_LIMIT = 32 * 1024  # bytes of an artifact (and of its diff) shown inline
MAX_TURNS_SHOWN = 200       # a hostile run with thousands of records still gives a bounded page
_DETAIL = 300
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class Blobs:
    """Reads blobs of one store, remembering which ones a page links (to copy them)."""

    def __init__(self, store: Store, *, public: bool):
        self.store, self.public = store, public
        self.linked: set[str] = set()
        self._listings: dict[str, dict[str, str]] = {}

    def read(self, digest) -> bytes | None:
        """The blob's bytes, or None when it is missing or does not match its digest (loose
        or packed: ``Store.find_blob``; not ``get_blob``, whose errors a page does not want)."""
        if not isinstance(digest, str) or not _DIGEST.match(digest):
            return None
        loc = self.store.find_blob(digest)
        try:
            data = loc.read() if loc is not None else None
        except OSError:
            return None
        return data if data is not None and hashlib.sha256(data).hexdigest() == digest[7:] else None

    def text(self, digest, limit: int = TEXT_LIMIT, *, pretty: bool = True) -> dict:
        """``{"text", "body", "size", "truncated", "digest", "missing", "binary"}`` for a
        template. A JSON object with a multi-line ``content`` string (a file read or
        written) shows that content as ``body``, as text, rather than one escaped line."""
        data = self.read(digest)
        if data is None:
            return {"text": "", "body": None, "size": 0, "truncated": False, "digest": digest,
                    "missing": bool(digest), "binary": False}
        try:
            text, binary = data.decode("utf-8"), False
        except UnicodeDecodeError:
            text, binary = data.decode("utf-8", "replace"), True
        body = None
        if pretty and len(data) <= 4 * limit:
            text, body = _pretty_json(text)
        truncated = len(data) > 4 * limit or len(text) + len(body or "") > limit
        if truncated:
            text = text[:limit]
            body = body[:max(0, limit - len(text))] if body else body
            self.linked.add(digest)
        return {"text": text, "body": body, "size": len(data), "truncated": truncated, "digest": digest,
                "missing": False, "binary": binary}

    def link(self, digest) -> str | None:
        """Mark a blob to be copied into the site and return its digest (None if absent)."""
        if isinstance(digest, str) and _DIGEST.match(digest) and self.store.find_blob(digest) is not None:
            self.linked.add(digest)
            return digest
        return None

    def reference(self, task_digest, path: str) -> bytes | None:
        """The task's reference file for an artifact path, from the task listing blob."""
        if task_digest not in self._listings:
            listing = self.read(task_digest) or b""
            rows = (ln.split("  ", 1) for ln in listing.decode("utf-8", "replace").splitlines() if "  " in ln)
            self._listings[task_digest] = {p: h for h, p in rows}
        hexd = self._listings[task_digest].get(f"reference/{path}")
        return self.read(f"sha256:{hexd}") if hexd else None


def _pretty_json(text: str) -> tuple[str, str | None]:
    """(pretty JSON, a multi-line ``content`` string pulled out of it, or None)."""
    s = text.lstrip()
    if not s.startswith(("{", "[")):
        return text, None
    try:
        obj = jsonio.loads(text)
        body = None
        if isinstance(obj, dict) and isinstance(obj.get("content"), str) and "\n" in obj["content"]:
            body = obj["content"]
            obj = {**obj, "content": f"({len(body):,} characters, shown below)"}
        return _dumps_pretty(obj), body
    except (ValueError, TypeError, RecursionError):
        return text, None


def _dumps_pretty(obj) -> str:
    """Indented, sorted JSON for people. orjson refuses nesting deeper than 254 levels
    (a hostile reply), which the caller turns into showing the raw text."""
    import orjson

    try:
        return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode("utf-8")
    except TypeError:  # an int beyond 64 bits, say: the standard library handles it
        return jsonio.dumps_pretty(obj)


# ---------------------------------------------------------------------------- summary

def summarise_run(run: SealedRun) -> dict:
    """The cached facts about a run that list, cell, gallery and experiment pages need."""
    start, end = run.start, run.end
    task = start.get("task") if isinstance(start.get("task"), dict) else {}
    calls = run.of_kind("call")
    policy = start.get("policy") if isinstance(start.get("policy"), dict) else {}
    return {
        "id": run.run_id,
        "at": run.records[0].at if run.records else "",
        "task": {k: task.get(k) for k in ("id", "version", "family", "digest")},
        "tier": str(start.get("tier", "?")), "model": str(start.get("model", "?")),
        "provider": str(start.get("provider", "?")),
        "simulated": bool(start.get("simulated", False)) or end.get("simulated") is True,
        "simulated_replies": end.get("simulated_replies") if isinstance(end.get("simulated_replies"), int) else 0,
        "usage_doubted": sum(1 for c in calls if c.body.get("usage_doubts")),
        "content_filter": sum(1 for c in calls if c.body.get("outcome") == "content_filter"),
        "profile": str((start.get("profile") or {}).get("name", "?")), "seed": start.get("seed"),
        "policy": {k: policy.get(k) for k in ("experiment", "cell", "policy", "trial", "step", "rerun")},
        "status": str(end.get("status", "open")), "reason": end.get("reason"),
        "passed": end.get("passed") is True, "gate_passed": end.get("gate_passed") is True,
        "cost": end.get("cost") if isinstance(end.get("cost"), dict) else None,
        "usage": end.get("usage") if isinstance(end.get("usage"), dict) else None,
        "elapsed_ms": end.get("elapsed_ms") if isinstance(end.get("elapsed_ms"), int) else None,
        "turns": end.get("turns"), "calls": len(calls),
        "injections": end.get("injection_attempts") or 0, "denials": end.get("denials") or 0,
        "length": any(c.body.get("outcome") in ("length", "reasoning_only") for c in calls),
        "errors": sum(1 for c in calls if c.body.get("outcome") == "error"),
        "failed_checks": [{"id": str(c.body.get("id")), "heldout": c.body.get("heldout") is True,
                           "detail": str(c.body.get("detail", ""))[:_DETAIL]}
                          for c in run.of_kind("check") if c.body.get("passed") is not True],
    }


# ---------------------------------------------------------------------------- replay view

def run_view(run: SealedRun, blobs: Blobs) -> dict:
    """Everything the replay page shows, grouped turn by turn."""
    turns: dict[int, dict] = {}
    checks, artifacts, other = [], [], []
    for rec in run.records:
        b = rec.body
        if rec.kind in ("call", "action"):
            turn = b.get("turn") if isinstance(b.get("turn"), int) else -1
            slot = turns.setdefault(turn, {"turn": turn, "calls": [], "actions": []})
            if rec.kind == "call":
                slot["calls"].append(_call_view(rec, blobs))
            else:
                slot["actions"].append(_action_view(rec, blobs))
        elif rec.kind == "check":
            checks.append(b)
        elif rec.kind == "artifact":
            artifacts.append(_artifact_view(b, run.start, blobs))
        elif rec.kind not in ("run.start", "run.end"):
            other.append({"seq": rec.seq, "at": rec.at, "kind": rec.kind, "body": _bounded_json(b)})
    ordered = [turns[k] for k in sorted(turns)]
    for slot in ordered:  # a reply cut off by the length limit is not a permission denial
        if any(c["outcome"] in ("length", "reasoning_only") for c in slot["calls"]):
            for a in slot["actions"]:
                if a["verdict"] == "invalid":
                    a["verdict"] = "cut_off"
    return {"turns": ordered[:MAX_TURNS_SHOWN], "turns_hidden": max(0, len(ordered) - MAX_TURNS_SHOWN),
            "checks": checks, "artifacts": artifacts, "other": other,
            "start": run.start, "end": run.end,
            "start_json": _bounded_json(run.start), "end_json": _bounded_json(run.end)}


def _call_view(rec, blobs: Blobs) -> dict:
    b = rec.body
    return {"at": rec.at, "attempt": b.get("attempt"), "outcome": b.get("outcome"),
            "finish_reason": b.get("finish_reason"), "usage": b.get("usage") if isinstance(b.get("usage"), dict) else None,
            "latency_ms": b.get("latency_ms"), "request_id": b.get("request_id"),
            "response_id": b.get("response_id"), "model_echoed": b.get("model_echoed"),
            "model_mismatch": b.get("model_mismatch") is True, "cost": b.get("cost"),
            "error": b.get("error") if isinstance(b.get("error"), dict) else None,
            "reply": blobs.text(b.get("reply")) if b.get("reply") else None,
            "usage_raw": b.get("usage_raw") if isinstance(b.get("usage_raw"), str) else None,
            "request": None if blobs.public else blobs.link(b.get("request")),
            "prompt_estimate": b.get("prompt_estimate"), "params": _bounded_json(b.get("params")),
            "reasoning": blobs.text(b.get("reasoning")) if isinstance(b.get("reasoning"), str) else None,
            "headers": b.get("headers") if isinstance(b.get("headers"), dict) else None,
            "model_upstream": b.get("model_upstream"),
            "usage_doubts": [str(d) for d in b.get("usage_doubts") or () if isinstance(d, str)],
            "cost_note": b.get("cost_note") if isinstance(b.get("cost_note"), str) else None,
            "truncated": [str(t) for t in b.get("truncated") or () if isinstance(t, str)],
            "stream": b.get("stream") if isinstance(b.get("stream"), dict) else None}


def _action_view(rec, blobs: Blobs) -> dict:
    b = rec.body
    args = b.get("args") if isinstance(b.get("args"), dict) else {}
    content = args.get("content") if isinstance(args.get("content"), str) else None
    shown = {k: v for k, v in args.items() if k != "content"}
    return {"name": b.get("name"), "args": _bounded_json(shown) if shown else "",
            "content": blobs.link(content) if content and content.startswith("sha256:") else None,
            "content_bytes": args.get("bytes"),
            "permitted": b.get("permitted") is not False, "reason": b.get("reason"),
            "verdict": _verdict(b),
            "injection": b.get("injection") if isinstance(b.get("injection"), dict) else None,
            "observation": blobs.text(b.get("observation")) if b.get("observation") else None}


def _verdict(b: dict) -> str:
    """What the runtime did with the action: ``permitted``; ``denied`` only for a permission
    refusal (FORMAT.md §3, reason ``denied: …``); ``invalid`` for a reply that named no valid
    action; ``refused`` for any other refusal (an output limit). ``run_view`` turns an invalid
    reply after a call cut off at max_tokens into ``cut_off``."""
    if b.get("permitted") is not False:
        return "permitted"
    reason = str(b.get("reason") or "")
    if reason.startswith("denied: "):
        return "denied"
    return "invalid" if reason.startswith("invalid reply") else "refused"


def _artifact_view(body: dict, start: dict, blobs: Blobs) -> dict:
    digest, path = body.get("digest"), str(body.get("path", "?"))
    view = blobs.text(digest, ARTIFACT_LIMIT, pretty=False)
    blobs.link(digest)
    ref = blobs.reference((start.get("task") or {}).get("digest"), path)
    data = blobs.read(digest)
    return {"path": path, "size": body.get("size"), "digest": digest, "view": view,
            "diff": _diff(ref, data, path), "has_reference": ref is not None,
            "matches_reference": ref is not None and ref == data}


def _diff(ref: bytes | None, got: bytes | None, path: str) -> str | None:
    """A unified diff of reference vs artifact, when both are small text and differ."""
    if ref is None or got is None or ref == got or len(ref) > ARTIFACT_LIMIT * 2 or len(got) > ARTIFACT_LIMIT * 2:
        return None
    try:
        a, b = ref.decode("utf-8").splitlines(), got.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None
    text = "\n".join(difflib.unified_diff(a, b, f"reference/{path}", f"artifact/{path}", lineterm="", n=2))
    return text[:ARTIFACT_LIMIT]


def _bounded_json(obj, limit: int = 4096) -> str:
    try:
        text = _dumps_pretty(obj)
    except (TypeError, ValueError, RecursionError):
        text = repr(obj)
    return text if len(text) <= limit else text[:limit] + "\n… (truncated)"
