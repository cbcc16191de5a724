"""The one Jinja2 environment every HTML page of parallax is rendered through.

Everything a model or an endpoint returned, every case id and every prompt is untrusted text.
Autoescape is on for every template, and `finalize` passes each `{{ ... }}` value through
`text.visible` before the engine escapes it, so a bidi control or a NUL shows as its escape
wherever a template prints it, without a filter anyone could forget. Values a page built
itself as markup (an inline SVG) are `Markup` and are left as they are.

The pages load nothing: their only script and style are inline, allowed by a Content Security
Policy that names their exact hashes, so text that slipped through could not run or fetch.
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from runner.text import visible


def _finalize(value: Any) -> Any:
    return value if isinstance(value, Markup) else visible(value)


@cache
def environment() -> Environment:
    """Templates under `runner/reports/templates/`, autoescaped, undefined names an error."""
    env = Environment(
        loader=PackageLoader("runner.reports", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["visible"] = visible
    return env


def source_hash(text: str) -> str:
    """A CSP source for one inline `<script>` or `<style>` element's exact content."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def content_security_policy(*, scripts: tuple[str, ...] = (), styles: tuple[str, ...] = ()) -> str:
    """Nothing but the page's own inline script and style: no fetch, no image from elsewhere."""
    script_src = " ".join(source_hash(s) for s in scripts) or "'none'"
    style_src = " ".join(source_hash(s) for s in styles) or "'none'"
    return (
        f"default-src 'none'; script-src {script_src}; style-src {style_src}; img-src data:; "
        "connect-src 'none'; base-uri 'none'; form-action 'none'"
    )
