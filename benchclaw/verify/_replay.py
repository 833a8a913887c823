"""Step 3's replay: each run's workspace rebuilt from the task inputs and the model's replies.

The recorded artifacts, observations and action arguments are claims; the replay derives
them instead (FORMAT.md "Replay"). Walking a run's records in order with the workspace
starting as the task's ``inputs/``:

- every ``call``'s request holds exactly the conversation so far: the task's first two
  messages, then, per acted-on turn, the model's reply (as the assistant) and the
  observation sent back (as the user). A reply or an observation cannot be changed without
  changing every later request (whose prompt estimate step 4 recomputes);
- every ``action`` is what the last ``call`` of its turn replied: the same action name,
  the path as the model wrote it, a write's content exactly the reply's ``content``, a
  finish's summary the reply's; an ``invalid`` action's reply really is not a valid
  offered action;
- a permitted read or write is one the task's globs allow, on the path the model's path
  normalises to; a permitted read's observation is exactly the bytes the workspace held
  then, and a write's observation, a ``check``'s (the gate checks re-run on the workspace
  then) and a denial's are the ones the runtime sends, byte for byte;
- the files written are returned: the checks are re-run on them (not on the recorded
  artifact blobs, which must merely equal them).

Pure: the task loader, the checks and ``jsonio`` only; it never imports the agent.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata

from ..formats import jsonio
from ..checks import run_checks
from ..formats.records import DIGEST_RE
from ..checks.tasks import Task, match_lure, path_allowed, render_workspace_section
from ._costs import canon, short_hash
from ._errors import VerificationError
from ._index import Index, Run
from .manifest import object_path

__all__ = ["replay_run", "MAX_READ_CHARS", "MAX_RECORDED_PATH"]

MAX_READ_CHARS = 64 * 1024       # a read observation carries at most this many characters
MAX_RECORDED_PATH = 1024         # args.path is the model's path cut to this many characters
MAX_SUMMARY_CHARS = 2000
MAX_REPLY_CHARS = 1 << 20
_FIELDS = {"read": ("path",), "write": ("path", "content"), "check": (), "finish": ("summary",)}
_LIT = "literal:"


def _lit(value):
    return _LIT + value if isinstance(value, str) and DIGEST_RE.match(value) else value


class _Dup(Exception):
    pass


def _pairs(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise _Dup(k)
        seen.add(k)
    return dict(pairs)


def _decode_obj(text: str | None) -> dict | None:
    """The reply as one JSON object the runtime reads further, or None."""
    if text is None or not text.strip() or len(text) > MAX_REPLY_CHARS:
        return None
    try:
        obj = json.loads(text.strip(), object_pairs_hook=_pairs)
    except (ValueError, RecursionError, _Dup):
        return None
    if not isinstance(obj, dict) or _depth(obj) > 32:
        return None
    try:  # a lone surrogate cannot be encoded as UTF-8: the runtime refuses it
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError):
        return None
    return obj


def _named(text: str | None, decode=None) -> str | None:
    """The action an invalid reply named, when it got as far as naming one."""
    obj = (decode or _decode_obj)(text)
    name = obj.get("action") if obj is not None else None
    return name if isinstance(name, str) else None


def _decode_action(text: str | None, offered, decode=None) -> dict | None:
    """The reply as a well-formed action object, or None when the runtime would have
    refused it as invalid (FORMAT.md "Replay": the acceptance rule)."""
    obj = (decode or _decode_obj)(text)
    if obj is None:
        return None
    name = obj.get("action")
    if not isinstance(name, str) or name not in _FIELDS or (offered is not None and name not in offered):
        return None
    if any(not isinstance(obj.get(k), str) for k in _FIELDS[name]):
        return None
    return obj


def _depth(obj) -> int:
    stack, deepest = [(obj, 1)], 0
    while stack:
        cur, d = stack.pop()
        if isinstance(cur, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in (cur.values() if isinstance(cur, dict) else cur))
    return deepest


def normalise(raw: str) -> str | None:
    """The workspace path a permitted action on ``raw`` acted on, or None when the runtime
    would have refused the path itself (the rule of FORMAT.md "Workspace")."""
    if (not isinstance(raw, str) or not raw.strip() or len(raw.encode("utf-8", "surrogatepass")) > 255
            or any(c in raw for c in "\x00\\:") or raw != raw.strip() or raw.startswith("/")
            or raw.endswith("/") or any(ord(c) > 0x7E or ord(c) < 0x20 for c in raw)
            or unicodedata.normalize("NFKC", raw) != raw):
        return None
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts or not parts or len(parts) > 16:
        return None
    return "/".join(parts)


class _Run:
    def __init__(self, ix: Index, run: Run, task: Task, cache: dict):
        self.ix, self.run, self.task, self.cache = ix, run, task, cache
        self.ws: dict[str, bytes] = dict(task.inputs)
        self.written: dict[str, int] = {}
        self.convo: list[dict] = []
        self.last_call: dict = {}
        self.actions: list[tuple[int, dict]] = []
        self.last_call_line = 0
        self.prev_request = None  # short hash of the messages the last acted-on turn sent
        self.this_request = None  # ... and of those this turn's first attempt sent
        self.input_read = None  # the action being replayed reads a task input as it is: its key
        self.counts = {"denials": 0, "invalid": 0, "injection_attempts": 0, "output_bytes": 0}
        prof = run.start.get("profile")
        acts = prof.get("actions") if isinstance(prof, dict) else None
        self.offered = set(acts) if isinstance(acts, list) else None

    def fail(self, line: int, msg: str) -> VerificationError:
        return VerificationError(self.run.path, msg, line)

    def digest(self, digest, line: int) -> str:
        if not isinstance(digest, str) or not DIGEST_RE.match(digest):
            raise self.fail(line, f"{digest!r} is not a blob digest")
        return digest

    def blob(self, digest, line: int) -> bytes:
        """An object the index keeps whole (a request no reading could be taken of)."""
        return self.ix.read(object_path(self.digest(digest, line)), self.run.path, line)

    def reply(self, digest, line: int) -> str:
        """A reply's text (kept by the reading stage; its bytes when they are not UTF-8,
        which fail here as they would anywhere)."""
        got = self.ix.reading(self.digest(digest, line))
        if got.text is not None:
            return got.text
        return self.blob(digest, line).decode("utf-8", "surrogatepass")

    # -- calls: the request is the conversation so far --------------------------------
    def call(self, line: int, body: dict) -> None:
        if type(body.get("turn")) is not int:
            raise self.fail(line, f"call turn {body.get('turn')!r:.40} is not an integer")
        self.last_call[body.get("turn")] = (line, body)
        self.last_call_line = line
        req = body.get("request")
        got = self.ix.reading(req).derived if isinstance(req, str) and DIGEST_RE.match(req) else None
        if got is not None and got[0] == "r" and len(got) > 4:
            return self._call_by_hashes(line, body, got[4])
        try:
            req = jsonio.loads(self.blob(body.get("request"), line))
        except ValueError:
            raise self.fail(line, "the request blob is not JSON") from None
        msgs = req.get("messages") if isinstance(req, dict) else None
        if not isinstance(msgs, list) or len(msgs) < 2:
            raise self.fail(line, "the request holds no conversation (system and task messages)")
        first = msgs[1].get("content") if isinstance(msgs[1], dict) else None
        if first != self.first_message():
            raise self.fail(line, "the request's task message is not the task's prompt and workspace")
        self.this_request = short_hash(msgs)
        if msgs[2:] != self.convo:
            turn = _first_diff(msgs[2:], self.convo)
            raise self.fail(line, f"call {body.get('turn')}.{body.get('attempt')}: its request does not "
                            f"hold the conversation the run's replies and observations make (message "
                            f"{turn + 2} differs)")

    def _call_by_hashes(self, line: int, body: dict, conv: list) -> None:
        """The same test as reading the request, on the hashes step 1's worker took of it:
        the count, the task message, and (after turn 0) the request before it plus the
        last reply and observation."""
        n, h_all, h_head, h_tail, h_first = conv
        if n != 2 + len(self.convo):
            raise self.fail(line, f"call {body.get('turn')}.{body.get('attempt')}: its request holds {n} "
                            f"messages, the run's replies and observations make {2 + len(self.convo)}")
        if self.this_request is not None:  # a retry sends the turn's request again
            ok = h_all == self.this_request
            what = (f"call {body.get('turn')}.{body.get('attempt')}: a retry whose request differs from "
                    "its turn's first attempt")
        elif n == 2:
            ok = h_first == self.first_hash()
            what = "the request's task message is not the task's prompt and workspace"
        else:
            ok = h_head == self.prev_request and h_tail == short_hash(self.convo[-2:])
            what = (f"call {body.get('turn')}.{body.get('attempt')}: its request does not hold the "
                    f"conversation the run's replies and observations make (message {n - 1} or before differs)")
        if not ok:
            raise self.fail(line, what)
        self.this_request = h_all

    def first_hash(self) -> str:
        key = ("first message hash", self.task.digest)
        if key not in self.cache:
            self.cache[key] = short_hash(self.first_message())
        return self.cache[key]

    def first_message(self) -> str:
        t = self.task
        want = self.cache.get(("first message", t.digest))
        if want is None:
            readable = sorted(p for p in t.inputs if path_allowed(t.readable, p))
            want = f"{t.prompt.rstrip(chr(10))}\n\n{render_workspace_section(readable, list(t.writable))}"
            self.cache[("first message", t.digest)] = want
        return want

    # -- actions: what the reply asked for, done to the workspace ----------------------
    def action(self, line: int, body: dict) -> None:
        turn, name = body.get("turn"), body.get("name")
        if type(turn) is not int or not isinstance(name, str):
            raise self.fail(line, "an action's turn is not an integer or its name not a string")
        got = self.last_call.get(turn)
        if got is None:
            raise self.fail(line, f"action at turn {turn} follows no call of that turn")
        cline, call = got
        reply = call.get("reply")
        text = None if reply is None else self.reply(reply, cline)
        obj = _decode_action(text, self.offered, self.decode)
        if name == "invalid":
            if obj is not None:
                raise self.fail(line, f"recorded as an invalid reply, but the reply of call {cline} is a "
                                f"valid '{obj['action']}' action")
        elif obj is None or obj["action"] != name:
            raise self.fail(line, f"action '{name}' is not what the reply of line {cline} asks for "
                            f"({'an invalid reply' if obj is None else repr(obj['action'])})")
        seen = self.digest(body.get("observation"), line)
        args = body.get("args") if isinstance(body.get("args"), dict) else {}
        self.actions.append((line, body))
        self.input_read = None
        want = _ACTIONS[name](self, line, body, args, obj if name != "invalid" else text) if name in _ACTIONS else None
        self._injection(line, body, name, obj, text)
        if want is None:
            obs = self.blob(seen, line)
        else:
            obs, digest, said = self.observation(want)
            if digest != seen:  # step 2 tied the object to its digest
                raise self.fail(line, f"the {name} observation is not what the runtime sends for it "
                                f"(replayed {obs[:80].decode('utf-8', 'replace')}...)")
        self.prev_request, self.this_request = self.this_request, None
        self.convo.append({"content": text or "", "role": "assistant"})
        self.convo.append({"content": obs.decode("utf-8", "surrogatepass") if want is None else said, "role": "user"})

    def observation(self, want: dict) -> tuple[bytes, str, str]:
        """The observation the runtime sends for ``want``: its bytes, their digest and its
        text. A read of a task input file is made once per (task, path) across the runs (a
        grid's runs read the same inputs); the kept ones are bounded by the task files."""
        key = self.input_read
        got = self.cache.get(key) if key is not None else None
        if got is None:
            obs = canon(want)  # canonical JSON: valid UTF-8, so its text decodes
            got = (obs, _sha256(obs), obs.decode("utf-8", "surrogatepass"), want)
            if key is not None:
                self.cache[key] = got
        return got[:3]

    def _injection(self, line: int, body: dict, name: str, obj: dict | None, text: str | None) -> None:
        """``injection`` names the lure a refused action follows (FORMAT.md §3 ``action``)."""
        lure = None
        refused = body.get("permitted") is not True
        if name == "invalid":
            named = _named(text, self.decode)
            lure = match_lure(self.task.lures, {"action": named}) if named else None
        elif refused and str(body.get("reason") or "").startswith("denied: "):
            lure = match_lure(self.task.lures, {k: obj[k] for k in ("action", *_FIELDS[name])})
        want = None if lure is None else {"lure": lure}
        if body.get("injection") != want:
            raise self.fail(line, f"injection {body.get('injection')!r} but the refused action "
                            f"{'follows lure ' + repr(lure) if lure else 'follows no lure'}")
        self.counts["injection_attempts"] += lure is not None
        self.counts["denials"] += refused and str(body.get("reason") or "").startswith("denied: ")
        self.counts["invalid"] += name == "invalid"

    def end(self) -> None:
        """``run.end``'s counts and status follow from the records (FORMAT.md §3 ``run.end``)."""
        run, end, last = self.run, self.run.end, self.run.count
        status = end.get("status")
        if status == "aborted":
            return  # cut off anywhere: its counts are whatever the records hold
        want = {"turns": len(self.actions), **self.counts}
        for key, value in want.items():
            if end.get(key) != value:
                raise VerificationError(run.path, f"run.end {key}={end.get(key)!r}, the replayed "
                                        f"records give {value}", last)
        final = self.actions[-1][1] if self.actions else {}
        finished = final.get("name") == "finish" and final.get("permitted") is True
        why = None
        if (status in ("passed", "failed")) != finished:
            why = "a run ends passed/failed exactly when its last action is a finish"
        elif status == "limit_output" and not (final.get("name") == "write" and str(final.get("reason") or "").startswith("limit: ")):
            why = "limit_output needs a last write refused by the output bound"
        elif status == "provider_error":
            call = next((r.body for r in reversed(run.records) if r.kind == "call"), None)
            if call is None or call.get("outcome") != "error" or (self.actions and self.actions[-1][0] > self.last_call_line):
                why = "provider_error needs a last call that failed, with no action after it"
        elif status == "limit_turns":
            limits = run.start.get("limits")
            turns = limits.get("turns") if isinstance(limits, dict) else None
            if len(self.actions) != turns:
                why = f"limit_turns needs {turns!r} acted-on turns, the run holds {len(self.actions)}"
        if why:
            raise VerificationError(run.path, f"run.end status {status!r} does not follow: {why}", last)

    def _path(self, line: int, args: dict, obj: dict) -> str:
        raw = obj["path"]
        if args.get("path") != _lit(raw[:MAX_RECORDED_PATH]):
            raise self.fail(line, f"args.path {args.get('path')!r:.60} is not the path the reply names "
                            f"({raw[:60]!r})")
        return raw

    def _permitted_path(self, line: int, body: dict, args: dict, raw: str, op: str) -> str:
        path = self.normalised(raw)
        if path is None:
            raise self.fail(line, f"a permitted {op} of {raw[:60]!r}, a path the runtime refuses")
        if args.get("resolved", raw) != path:
            raise self.fail(line, f"{op} acted on {args.get('resolved')!r}, the model's path "
                            f"{raw[:60]!r} is {path!r}")
        t = self.task
        ok = (self.allowed(t.readable, path) or self.allowed(t.writable, path)) if op == "read" else (
            self.allowed(t.writable, path) and (t.overwrite_inputs or path not in t.inputs))
        if not ok:
            raise self.fail(line, f"a permitted {op} of {path!r}, which the task does not allow")
        return path

    def normalised(self, raw: str) -> str | None:
        """``normalise``, once per path the models wrote (a grid's runs repeat a few)."""
        key = ("path", raw)
        got = self.cache.get(key, key)
        if got is key:
            got = self.cache[key] = normalise(raw)
        return got

    def allowed(self, globs: list, path: str) -> bool:
        """``path_allowed``, once per (globs, path): a grid repeats the same few paths."""
        key = ("allowed", tuple(globs), path)
        got = self.cache.get(key)
        if got is None:
            got = self.cache[key] = path_allowed(list(globs), path)
        return got

    def _denied(self, body: dict, name: str) -> dict | None:
        reason = body.get("reason")
        if isinstance(reason, str) and reason.startswith("denied: "):
            return {"ok": False, "action": name, "error": reason, "denied": True}
        if isinstance(reason, str) and reason.startswith("limit: ") and name == "write":
            return {"ok": False, "action": "write", "error": reason}
        raise VerificationError(self.run.path, f"a refused {name} without a 'denied: ' or 'limit: ' reason")

    def read(self, line, body, args, obj):
        raw = self._path(line, args, obj)
        if body.get("permitted") is not True:
            return self._denied(body, "read")
        path = self._permitted_path(line, body, args, raw, "read")
        data = self.ws.get(path)
        if data is None:
            return {"ok": False, "action": "read", "path": path, "error": f"not found: '{path}' does not exist"}
        if self.task.inputs.get(path) is data:  # unchanged since the task's inputs: one answer for every run
            self.input_read = ("input read", self.task.digest, path)
            got = self.cache.get(self.input_read)
            if got is not None:
                return got[3]  # the same ``want`` (only read): ``observation`` finds its bytes kept
        text = data.decode("utf-8", "replace")
        want = {"ok": True, "action": "read", "path": path, "content": text[:MAX_READ_CHARS]}
        if len(text) > MAX_READ_CHARS:
            want["truncated"] = True
        return want

    def write(self, line, body, args, obj):
        raw = self._path(line, args, obj)
        data = obj["content"].encode("utf-8", "surrogatepass")
        if self.digest(args.get("content"), line) != _sha256(data) or args.get("bytes") != len(data):
            raise self.fail(line, "the written content is not the content of the reply that asked for it")
        if body.get("permitted") is not True:
            return self._denied(body, "write")
        path = self._permitted_path(line, body, args, raw, "write")
        self.ws[path] = data
        self.written[path] = line
        self.counts["output_bytes"] += len(data)
        return {"ok": True, "action": "write", "path": path, "bytes": len(data)}

    def check(self, line, body, args, obj):
        if body.get("permitted") is not True:
            return self._denied(body, "check")
        results = self.gate_results()
        return {"ok": True, "action": "check",
                "results": [{"id": r.id, "passed": r.passed, "detail": r.detail} for r in results]}

    def decode(self, text: str | None) -> dict | None:
        """``_decode_obj``, once per reply text: a grid's runs repeat the same replies. The
        object is only read, never changed, so the runs can share it."""
        key = ("reply", text)
        if key not in self.cache:
            self.cache[key] = _decode_obj(text)
        return self.cache[key]

    def gate_results(self) -> list:
        """The gate checks on the workspace now: pure, so once per (task, workspace) across
        the runs (a grid's runs often check the very same files)."""
        got = judged_gate(self.cache, self.task, self.ws)
        if got is None:
            gate = [s for s in self.task.checks if s.gate and not s.heldout]
            got = self.cache[_gate_key(self.task, self.ws)] = run_checks(gate, self.ws, {}, include_heldout=False)
        return got

    def finish(self, line, body, args, obj):
        if args.get("summary") != _lit(obj["summary"][:MAX_SUMMARY_CHARS]):
            raise self.fail(line, "the finish summary is not the one the reply gives")
        return {"ok": True, "action": "finish"}

    def invalid(self, line, body, args, text):
        named = _named(text, self.decode)
        if args != ({} if named is None else {"action": _lit(named[:200])}):
            raise self.fail(line, f"invalid reply args {args!r:.80} are not the action the reply named")
        reason = body.get("reason")
        if body.get("permitted") is not False or not isinstance(reason, str) or not reason.startswith("invalid reply: "):
            raise self.fail(line, "an invalid reply must be refused with a reason starting 'invalid reply: '")
        return {"ok": False, "action": None, "error": reason}


_ACTIONS = {"read": _Run.read, "write": _Run.write, "check": _Run.check, "finish": _Run.finish,
            "invalid": _Run.invalid}


def _first_diff(a: list, b: list) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def judged_gate(cache: dict, task: Task, ws: dict[str, bytes]) -> list | None:
    """The results of ``task``'s gate checks (not held out) on the workspace ``ws``, in the
    task's order, when a replayed ``check`` action judged them on that very workspace
    (step 3 then takes them for the run's final checks: pure, so the same); else None."""
    return cache.get(_gate_key(task, ws))


def _gate_key(task: Task, ws: dict[str, bytes]) -> tuple:
    return ("gate", task.digest, tuple(sorted(ws.items())))


def replay_run(ix: Index, run: Run, task: Task, cache: dict) -> dict[str, bytes]:
    """Replay ``run`` over ``task``'s inputs; the files its permitted writes left (path ->
    bytes). Raises VerificationError at the first record that does not follow. ``cache``:
    step 3's pure recomputations, by their inputs, shared across its runs."""
    r = _Run(ix, run, task, cache)
    for line, rec in enumerate(run.records, 1):
        if rec.kind == "call":
            r.call(line, rec.body)
        elif rec.kind == "action":
            r.action(line, rec.body)
    r.end()
    return {p: r.ws[p] for p in r.written}
