"""The browser microphone page: static files shipped inside the package, served by the server.

Only the files named in ``PAGES`` are served (no directory walking, so no path tricks); they are
read from the installed package on each request (they are a few kilobytes), which works from a
source checkout and from a wheel alike.
"""

from __future__ import annotations

from importlib.resources import files

__all__ = ["PAGES", "static_file"]

PAGES: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/audio-worklets.js": ("audio-worklets.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}


def static_file(path: str) -> tuple[bytes, str] | None:
    """The body and content type served at URL path ``path``, or None when nothing is."""
    entry = PAGES.get(path)
    if entry is None:
        return None
    name, content_type = entry
    return files(__name__).joinpath(name).read_bytes(), content_type
