"""The static replay site: every run replayable, every claim one click from its evidence.

``build_site`` renders runs, tasks and the analysis's summary into plain HTML with
relative links, inline SVG charts and no script, so the site works opened from disk and
under any path on any static host. See ``docs/site.md`` for the pages, what a public
build leaves out, and how incremental rebuilds work.
"""

from ._build import BuildReport, build_site
from ._render import make_overlay_env, run_url
from ._runview import Blobs, run_view, summarise_run
from ._serve import make_server, serve_site

# The studio renders live run pages with the site's own templates and run view, so those
# are part of the site's public face too (not reached into as private modules).
__all__ = ["build_site", "BuildReport", "serve_site", "make_server", "make_overlay_env", "run_url",
           "Blobs", "run_view", "summarise_run"]
