"""The studio's web face: a Starlette app over ``Studio``, served by uvicorn.

Why it is built this way:
- **Established parts.** Starlette routes and responses, uvicorn's HTTP parser; live
  updates are server-sent events (a ``text/event-stream`` response), which every browser
  follows with ``EventSource`` and no framework. Pages render with the replay site's jinja2
  environment, with the studio's ``base.html`` laid over the site's, so a sealed run's
  replay page is the site's very ``run.html``.
- **Works without JavaScript.** A job page is rendered on the server from the same events
  the stream sends, and refreshes itself (``<noscript>`` meta refresh) while the job runs.
- **Nothing a request carries reaches the filesystem.** Path parameters are checked
  against fixed patterns (hex ids) and form values against the allow-lists; blobs are
  served only when a studio run's replay page links them.
- **Every response** gets a strict Content-Security-Policy (scripts, styles and event
  streams from this origin only, no inline anything, no frames, forms only to this
  origin), ``nosniff``, a same-origin referrer policy (browsers then send ``Origin`` on
  the form post, which the forgery check reads) and ``no-store``. Request bodies are bounded
  before they are read, and POSTs need the session cookie, its form token and a
  same-origin ``Origin``/``Sec-Fetch-Site`` when the browser sends them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from pathlib import Path
from urllib.parse import parse_qs

from ..formats import jsonio
from ..errors import BenchClawError
from ..paths import site_templates_dir
from ..providers.vault import redact
from .service import Refusal, Studio
from .sessions import COOKIE, SessionKeys

__all__ = ["create_app", "CSP", "MAX_BODY"]

log = logging.getLogger("benchclaw.studio")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
MAX_BODY = 2048            # bytes of a form post: three ids and a token
MAX_HEAD = 8192            # bytes of a request's path and headers
KEEPALIVE_S = 15.0
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_RUN = re.compile(r"^[0-9a-f]{64}$")
_FORM_FIELDS = ("csrf", "task", "policy", "profile")
_STATIC = {"style.css": ("static/style.css", "text/css"), "studio.css": ("studio/studio.css", "text/css"),
           "studio.js": ("studio/studio.js", "text/javascript")}
_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY"),
            (b"cross-origin-opener-policy", b"same-origin"), (b"cross-origin-resource-policy", b"same-origin")]


async def _plain(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())] + _HEADERS})
    await send({"type": "http.response.body", "body": body})


class _SecurityHeaders:
    """Pure ASGI middleware: refuses oversized request heads (431), and puts the headers
    above on every response, ``no-store`` on everything but static files. (Pure ASGI, so
    event streams are not buffered.)"""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        static = scope.get("path", "").startswith("/static/")
        size = sum(len(k) + len(v) for k, v in scope.get("headers", ())) + len(scope.get("raw_path") or b"")
        if size > MAX_HEAD:
            return await _plain(send, 431, b"request headers too large\n")

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"server"]
                headers += _HEADERS
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_app(studio: Studio, keys: SessionKeys, *, templates: Path | None = None):
    """The ASGI app. Opening and closing ``studio`` is the caller's (``serve_studio``)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
    from starlette.routing import Route

    from ..site import Blobs, make_overlay_env, run_url, run_view, summarise_run

    tdir = templates or site_templates_dir()
    env = make_overlay_env(tdir / "studio", tdir)
    statics = {name: ((tdir / rel).read_bytes(), ctype) for name, (rel, ctype) in _STATIC.items()}
    replays: OrderedDict[str, tuple[str, frozenset]] = OrderedDict()   # run id -> (html, linked blobs)
    cfg = studio.config

    # -- sessions -----------------------------------------------------------------------
    def session(request) -> str | None:
        return keys.session_of(request.cookies.get(COOKIE))

    def with_session(request, response_for):
        sid = session(request)
        cookie = None
        if sid is None:
            sid, cookie = keys.new_session()
        resp = response_for(sid)
        if cookie is not None:
            resp.set_cookie(COOKIE, cookie, max_age=30 * 86400, path="/", httponly=True, samesite="lax",
                            secure=cfg.secure_cookies)
        return resp

    def page(template: str, status: int = 200, **ctx) -> HTMLResponse:
        html = env.get_template(template).render(root="/", public=True, simulated=studio.simulated, **ctx)
        return HTMLResponse(redact(html), status_code=status)

    def refused(heading: str, message: str, status: int, sid: str | None = None) -> HTMLResponse:
        view = studio.session_view(sid) if sid else None
        return page("refused.html", status, title=heading, heading=heading, message=message, view=view)

    # -- pages --------------------------------------------------------------------------
    async def index(request):
        return with_session(request, lambda sid: page(
            "index.html", title="Studio", view=studio.session_view(sid), choice=studio.choice(),
            csrf=keys.csrf_token(sid), jobs=studio.session_jobs(sid)[:20]))

    async def start(request):
        sid = session(request)
        problem = _forged(request, sid, keys)
        if problem:
            return refused("Refused", problem, 403)
        form = await _read_form(request)
        if isinstance(form, Response):
            return form
        if not keys.csrf_ok(sid, form.get("csrf")):
            return refused("Refused", "the form token does not match this session; reload the page", 403)
        try:
            job = studio.start(sid, form.get("task", ""), form.get("policy", ""), form.get("profile", ""))
        except Refusal as r:
            heading = {"budget": "Budget spent", "day_budget": "The studio is done for today",
                       "busy": "Busy", "rate": "Slow down", "input": "Not on the list"}[r.reason]
            return refused(heading, str(r), r.status, sid)
        return RedirectResponse(f"/jobs/{job.id}", status_code=303)

    def own_job(request):
        jid = request.path_params["job"]
        sid = session(request)
        job = studio.jobs.get(jid) if _HEX32.match(jid) else None
        return job if job is not None and job.session == sid else None

    async def job_page(request):
        job = own_job(request)
        if job is None:
            return refused("Not found", "no such job in this session (the studio may have restarted; "
                           "your runs are listed on the studio's page)", 404)
        return page("job.html", title=f"Job {job.id[:12]}", job=job, view=studio.session_view(job.session))

    async def events(request):
        job = own_job(request)
        if job is None:
            return PlainTextResponse("no such job in this session\n", status_code=404)
        after = _after(request.headers.get("last-event-id") or request.query_params.get("after"))
        return StreamingResponse(_stream(job, after), media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    async def replay(request):
        run_id = request.path_params["run"]
        if not _RUN.match(run_id) or request.path_params["aa"] != run_id[:2]:
            return refused("Not found", "no such studio run", 404)
        got = replays.get(run_id)
        if got is None:
            got = await asyncio.to_thread(render_replay, run_id)
            if got is None:
                return refused("Not found", "no such studio run", 404)
            replays[run_id] = got
            while len(replays) > 512:
                replays.popitem(last=False)
        return HTMLResponse(got[0])

    def render_replay(run_id: str):
        try:
            run = studio.store.read_run(run_id)
        except BenchClawError:
            return None
        pol = run.start.get("policy")
        if not isinstance(pol, dict) or pol.get("studio") != studio.journal_id:
            return None  # only the studio's own runs are served
        blobs = Blobs(studio.store, public=True)
        summary = summarise_run(run)
        html = env.get_template("run.html").render(root="/", public=True, simulated=summary["simulated"],
                                                   title=f"Run {run_id[:12]}", summary=summary,
                                                   view=run_view(run, blobs))
        return redact(html), frozenset(blobs.linked)

    async def blob(request):
        hexd = request.path_params["hex"]
        digest = "sha256:" + hexd
        if not _RUN.match(hexd) or request.path_params["aa"] != hexd[:2] or \
                not any(digest in linked for _, linked in replays.values()):
            return PlainTextResponse("not found\n", status_code=404)
        try:
            data = studio.store.get_blob(digest)
        except BenchClawError:
            return PlainTextResponse("not found\n", status_code=404)
        return Response(redact(data.decode("utf-8", "replace")), media_type="text/plain; charset=utf-8")

    async def static(request):
        got = statics.get(request.path_params["name"])
        if got is None:
            return PlainTextResponse("not found\n", status_code=404)
        return Response(got[0], media_type=got[1], headers={"cache-control": "public, max-age=300"})

    async def health(request):
        return PlainTextResponse("ok\n")

    async def not_found(request, exc):
        status = getattr(exc, "status_code", 404)
        return refused("Not found" if status == 404 else "Refused", "nothing here", status)

    async def server_error(request, exc):
        log.error("studio: %s", redact(f"{type(exc).__name__}: {exc}"))
        return refused("Something went wrong", "the studio could not answer this request; your budget is "
                       "unaffected", 500)

    routes = [Route("/", index), Route("/start", start, methods=["POST"]),
              Route("/jobs/{job}", job_page), Route("/jobs/{job}/events", events),
              Route("/runs/{aa}/{run}.html", replay), Route("/objects/{aa}/{hex}.txt", blob),
              Route("/static/{name}", static), Route("/healthz", health)]
    middleware = [Middleware(_SecurityHeaders)]
    if cfg.allowed_hosts:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(cfg.allowed_hosts)))
    env.globals["run_url"] = run_url
    return Starlette(routes=routes, middleware=middleware,
                     exception_handlers={404: not_found, 405: not_found, Exception: server_error})


# ----------------------------------------------------------------------------- helpers

def _forged(request, sid: str | None, keys: SessionKeys) -> str | None:
    """Why a state-changing request looks forged, or None."""
    if sid is None:
        return "no studio session: open the studio's page first (cookies must be on)"
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return "a request from another site cannot start a run"
    origin = request.headers.get("origin")
    if origin is not None:
        host = request.headers.get("host", "")
        if origin not in (f"http://{host}", f"https://{host}"):
            return "a request from another origin cannot start a run"
    return None


async def _read_form(request):
    """The urlencoded form of a POST, bounded; a 4xx response when it is not one."""
    from starlette.responses import PlainTextResponse

    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        return PlainTextResponse("expected a form (application/x-www-form-urlencoded)\n", status_code=415)
    length = request.headers.get("content-length")
    if length is None or not length.isdigit():
        return PlainTextResponse("a Content-Length is required\n", status_code=411)
    if int(length) > MAX_BODY:
        return PlainTextResponse(f"request body too large (at most {MAX_BODY} bytes)\n", status_code=413)
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            return PlainTextResponse(f"request body too large (at most {MAX_BODY} bytes)\n", status_code=413)
    try:
        fields = parse_qs(body.decode("ascii"), strict_parsing=bool(body), max_num_fields=len(_FORM_FIELDS))
    except (UnicodeDecodeError, ValueError):
        return PlainTextResponse("malformed form\n", status_code=400)
    if set(fields) - set(_FORM_FIELDS) or any(len(v) != 1 or len(v[0]) > 200 for v in fields.values()):
        return PlainTextResponse("malformed form: unexpected or repeated fields\n", status_code=400)
    return {k: v[0] for k, v in fields.items()}


def _after(value) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        return -1
    return n if 0 <= n < 1_000_000 else -1


async def _stream(job, after: int):
    """The job's events after ``after`` as server-sent events, until ``done``."""
    sent = after
    while True:
        while sent + 1 < len(job.events):
            sent += 1
            n, kind, data = job.events[sent]
            yield f"id: {n}\nevent: {kind}\ndata: {jsonio.dumps(data).decode()}\n\n"
            if kind == "done":
                return
        if not job.running and sent + 1 >= len(job.events):
            return
        before = len(job.events)
        await job.wait(sent, KEEPALIVE_S)
        if len(job.events) == before and job.running:
            yield ": keep-alive\n\n"
