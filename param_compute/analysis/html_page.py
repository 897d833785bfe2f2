"""The frame every HTML report shares: one stylesheet, escaping, a page around a body.

Reports are self-contained: inline CSS, images as data URIs or inline SVG, no scripts, no
external assets, so they read offline and attach to an issue. Every piece of data that enters a
page goes through :func:`e` (results files are untrusted input).
"""

from __future__ import annotations

import html
from typing import Any, Iterable, Sequence, Tuple

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px;
       color: #222; max-width: 1500px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; } h3 { font-size: 15px; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
th { background: #f3f3f3; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.config { font-family: ui-monospace, Menlo, Consolas, monospace; white-space: nowrap; }
td.off { background: #fff3cd; }
tr.error td { background: #fdecea; }
tr.faster td.verdict { color: #1a7f37; font-weight: 600; }
tr.slower td.verdict { color: #c62828; font-weight: 600; }
tr.same td.verdict { color: #777; }
td.share { position: relative; min-width: 160px; }
td.share .bar { position: absolute; left: 0; top: 2px; bottom: 2px; background: #cfe2f3; }
td.share .pct { position: relative; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; font-size: 13px; }
dt { font-weight: 600; } dd { margin: 0; }
img { max-width: 100%; border: 1px solid #eee; }
.note { color: #666; font-size: 13px; }
svg text { fill: #222; }
"""


def e(value: Any) -> str:
    """``value`` as HTML text (None: empty)."""
    return html.escape("" if value is None else str(value))


def page(title: str, body: Iterable[str]) -> str:
    """A whole HTML document: ``title`` as its title and heading, then ``body``."""
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{e(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{e(title)}</h1>" + "".join(body) + "</body></html>\n")


def definitions(items: Sequence[Tuple[str, Any]]) -> str:
    """A ``<dl>`` of the items whose value is not empty."""
    rows = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in items if v not in (None, ""))
    return f"<dl>{rows}</dl>"
