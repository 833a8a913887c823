"""The jinja2 environment, filters and Markdown renderer of the replay site.

Why it is built this way:
- Autoescape is on for every template and nothing model-produced is ever marked safe:
  replies, observations, artifacts and check details reach the page only as escaped text,
  so a reply carrying ``<script>`` shows as text and never runs.
- Markdown (task prompts, experiment notes) goes through markdown-it-py with raw HTML
  disabled; images and autolinks are switched off and every link is rendered as its text
  followed by the target in ``<code>``, so no Markdown can make the page load or point at
  anything outside the site.
- Links are relative: a page is rendered with ``root`` (``""``, ``"../"``, …) and the URL
  helpers return paths relative to the site root, so the site works from disk and under
  any path on any static host.
- The environment is built once per process (templates compile once), and pages are
  scrubbed of the builder's absolute paths and any API key value as a last line of
  defence (evidence never holds them; the scrub makes sure the site never does either).
"""

from __future__ import annotations

import functools
import hashlib
import os
from decimal import Decimal, InvalidOperation
from pathlib import Path

__all__ = ["make_env", "make_overlay_env", "renderer_digest", "Scrubber", "markdown", "run_url", "cell_slug", "object_url",
           "task_url", "exp_url", "cell_url", "exp_dir", "cells_list_url"]

_SITE_PKG = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------- URLs (relative to root)

def run_url(run_id: str) -> str:
    return f"runs/{run_id[:2]}/{run_id}.html"


def task_url(task_id: str, version) -> str:
    return f"tasks/{_safe(task_id)}-v{_safe(str(version))}.html"


def exp_url(exp_id: str) -> str:
    return f"experiments/{_safe(exp_id)}.html"


@functools.lru_cache(maxsize=65536)  # every cell's url is asked for several times a build
def cell_slug(cell: str) -> str:
    """A file-name-safe, unique slug of a cell id (``quotes-x@1/direct/2``)."""
    plain = cell.replace("/", "~")
    if "~" not in cell and _safe(plain) == plain and not plain.startswith("_"):
        return plain
    return _safe(plain)[:80] + "-" + hashlib.sha256(cell.encode()).hexdigest()[:10]


def cell_url(exp_id: str, cell: str) -> str:
    return f"experiments/{_safe(exp_id)}/cells/{cell_slug(cell)}.html"


def exp_dir(exp_id: str) -> str:
    """The folder of an experiment's cell pages and cell lists (with a trailing slash)."""
    return f"experiments/{_safe(exp_id)}/"


def cells_list_url(exp_id: str, page: int) -> str:
    return f"{exp_dir(exp_id)}cells-{page}.html"


def object_url(digest: str) -> str:
    """Where a copied blob lives. Always ``.txt``: browsers and static hosts then serve it
    as plain text, so a blob holding HTML (a hostile reply) is never rendered as a page."""
    hexd = digest.removeprefix("sha256:")
    return f"objects/{hexd[:2]}/{hexd}.txt"


_SAFE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@~")


def _safe(text: str) -> str:
    out = "".join(c if c in _SAFE_CHARS else "_" for c in text)
    return "_" + out if out.startswith(".") or not out else out


# ---------------------------------------------------------------------------- formatting filters

def fmt_usd(value) -> str:
    """``"0.000177"`` -> ``$0.000177``; bounds ``(low, high)`` -> ``$low–$high``."""
    if value is None:
        return "–"
    if isinstance(value, (tuple, list)):
        low, high = (fmt_usd(v) for v in value)  # a mean's outward-rounded ends may read the same
        return low if low == high else f"{low}–{high}"
    try:
        d = Decimal(str(value))
    except InvalidOperation:
        return str(value)
    if d == 0:
        return "$0"
    if d >= 1:
        return f"${d.quantize(Decimal('0.01'))}"
    text = format(d.normalize(), "f")
    return "$" + _sig(text, 3)


def _sig(text: str, digits: int) -> str:
    """Keep ``digits`` significant digits of a plain decimal string below 1 (no rounding
    beyond truncation, so the figure never looks cheaper than it is by more than a digit)."""
    if "." not in text:
        return text
    whole, frac = text.split(".")
    lead = len(frac) - len(frac.lstrip("0"))
    return f"{whole}.{frac[:lead + digits]}".rstrip("0").rstrip(".")


def fmt_cost(cost) -> str:
    """A ``cost`` object of a record: exact, or ``≤ high`` bounds when usage was unknown."""
    if not isinstance(cost, dict):
        return "–"
    if cost.get("known", True) and cost.get("low") == cost.get("high"):
        return fmt_usd(cost.get("low"))
    return f"{fmt_usd(cost.get('low'))}–{fmt_usd(cost.get('high'))}"


def fmt_tokens(n) -> str:
    return f"{n:,}" if isinstance(n, int) else "–"


def fmt_ms(ms) -> str:
    if not isinstance(ms, int):
        return "–"
    if ms < 1000:
        return f"{ms} ms"
    return f"{Decimal(ms) / 1000:.1f} s"


def fmt_pct(value) -> str:
    """A fraction (Decimal or ``"0.75"``) as a percentage."""
    if value is None:
        return "–"
    d = Decimal(str(value)) * 100
    return f"{d.quantize(Decimal('1'))}%" if d == d.to_integral_value() else f"{d:.1f}%"


def fmt_pct_range(vs) -> str:
    """A change ``{"low": "-0.3400", "high": "-0.3000"}`` as ``−34.0% to −30.0%``."""
    if not isinstance(vs, dict):
        return "–"
    try:
        lo, hi = (Decimal(str(vs[k])) * 100 for k in ("low", "high"))
    except (InvalidOperation, KeyError):
        return "–"
    text = lambda d: f"{d:+.1f}%".replace("-", "−")  # noqa: E731
    return text(lo) if lo == hi else f"{text(lo)} to {text(hi)}"


def short(text, n: int = 12) -> str:
    return str(text)[:n]


def basename(path) -> str:
    """Only the last part of a path (a spec path may be absolute on the machine that ran it)."""
    return str(path).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


# ---------------------------------------------------------------------------- markdown

_MD = None


def _md():
    global _MD
    if _MD is None:
        from markdown_it import MarkdownIt

        md = MarkdownIt("commonmark", {"html": False, "linkify": False})
        md.disable(["image", "autolink", "html_inline", "html_block"])

        def link_open(renderer, tokens, idx, options, env):
            return '<span class="md-link">'

        def link_close(renderer, tokens, idx, options, env):
            from markupsafe import escape

            j = idx - 1
            while j >= 0 and tokens[j].type != "link_open":
                j -= 1
            href = tokens[j].attrGet("href") if j >= 0 else ""
            return f'</span> <code class="md-href">({escape(href)})</code>' if href else "</span>"

        md.add_render_rule("link_open", link_open)
        md.add_render_rule("link_close", link_close)
        _MD = md
    return _MD


def markdown(text):
    """Render Markdown to safe HTML: raw HTML shown as text, no images, links as text."""
    from markupsafe import Markup

    return Markup(_md().render(str(text or "")))


# ---------------------------------------------------------------------------- environment

def renderer_digest(templates_dir: Path, public: bool) -> str:
    """Digest of everything that shapes a page besides its data: every template and static
    file, this package's code, the analysis code and the pure modules it uses (a cached
    summary is only as good as the code that computed it), and the public flag. A change
    re-renders every page."""
    from .. import analysis
    from ..formats import policies
    from ..formats import interval, rules

    h = hashlib.sha256(b"benchclaw-site 1\n" + (b"public\n" if public else b"full\n"))
    for base in (templates_dir, _SITE_PKG, Path(analysis.__file__).parent):
        for path in sorted(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            h.update(path.relative_to(base).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    # the pure modules the analysis computes with, found by module rather than by path so
    # that moving a file cannot drop it from the digest
    for module in (policies, rules, interval):
        path = Path(module.__file__)
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


_ENVS: dict[tuple[str, str], object] = {}


def make_env(templates_dir: Path, renderer: str | None = None):
    """A jinja2 environment over ``templates_dir`` with autoescape on for every file.
    (No bytecode cache: compiled templates embed their absolute file names, and nothing
    holding a machine path may be written into the site.) With ``renderer`` (the
    ``renderer_digest`` of these templates) the environment and the templates it compiled
    are reused for the rest of the process: the builder's own pages, in-process page
    rendering and forked workers then compile each template once, not once each."""
    key = (str(templates_dir), renderer)
    if renderer is not None and key in _ENVS:
        return _ENVS[key]
    env = _new_env(templates_dir)
    if renderer is not None:
        _ENVS.clear()  # one renderer at a time: a changed template set replaces the old
        _ENVS[key] = env
    return env


def make_overlay_env(overlay_dir: Path, templates_dir: Path):
    """An environment like ``make_env``'s where templates in ``overlay_dir`` take
    precedence: the studio renders the site's very ``run.html`` inside its own ``base.html``.
    Not cached (one per studio process)."""
    return _new_env(templates_dir, overlay_dir)


def _new_env(templates_dir: Path, overlay_dir: Path | None = None):
    import jinja2

    loader = jinja2.FileSystemLoader(str(templates_dir))
    if overlay_dir is not None:
        loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(str(overlay_dir)), loader])
    env = jinja2.Environment(
        loader=loader,
        autoescape=True, undefined=jinja2.ChainableUndefined,
        trim_blocks=True, lstrip_blocks=True, auto_reload=False, cache_size=-1,
    )
    env.filters.update(usd=fmt_usd, cost=fmt_cost, tokens=fmt_tokens, ms=fmt_ms, pct=fmt_pct,
                       short=short, basename=basename, markdown=markdown, pctrange=fmt_pct_range)
    env.globals.update(run_url=run_url, task_url=task_url, exp_url=exp_url, cell_url=cell_url,
                       object_url=object_url, cells_list_url=cells_list_url)
    return env


class Scrubber:
    """Removes the builder's absolute paths and any API key value from rendered text."""

    def __init__(self, paths: list[Path | str], keys: list[str] | None = None):
        found = {str(Path(p).resolve()) for p in paths if p} | {str(p) for p in paths if p and os.path.isabs(str(p))}
        found.add(os.path.expanduser("~"))
        # Only paths of two or more components: scrubbing "/root" or "/tmp" alone would
        # also rewrite evidence that merely mentions them (an injection asking for /root).
        self.paths = sorted((p for p in found if p.rstrip("/").count("/") >= 2), key=len, reverse=True)
        self.keys = sorted(k for k in (keys if keys is not None else _env_keys()) if len(k) >= 8)

    def __call__(self, text: str) -> str:
        for key in self.keys:
            if key in text:
                text = text.replace(key, "[REDACTED]")
        for p in self.paths:
            if p in text:
                text = text.replace(p, "…")
        return text


def _env_keys() -> list[str]:
    """Values of environment variables that hold API keys (``*_API_KEY``)."""
    return [v for k, v in os.environ.items() if k.endswith("_API_KEY") and v]
