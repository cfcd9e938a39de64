"""Small Sphinx fixes for the published site (loaded from _config.yml, ``local_extensions``).

* sphinx-thebe registers its configuration script each time documents are read, so a build that
  reads twice declares ``const THEBE_JS_URL`` twice and every page logs an error: keep each script once.
* pydata-sphinx-theme 0.15 writes an empty theme mode when none is configured (sphinx-book-theme
  1.1 does not accept the ``default_mode`` option) and logs "invalid theme mode" on every page:
  start in ``light`` (the figures are drawn on white); the reader's switch still works.
"""

from __future__ import annotations

from typing import Any


def _page_context(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    context.setdefault("default_mode", "light")
    if not context["default_mode"]:
        context["default_mode"] = "light"
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple[str, str]] = set()
    kept = []
    for js in scripts:
        key = (str(getattr(js, "filename", js) or ""), str(getattr(js, "attributes", {}).get("body", "")))
        if key in seen:
            continue
        seen.add(key)
        kept.append(js)
    scripts[:] = kept


def setup(app: Any) -> dict[str, Any]:
    app.connect("html-page-context", _page_context, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
