"""The inline style attributes that the virtual-chinrest plugin (``@jspsych/plugin-virtual-chinrest``, pinned by
``human_study/package-lock.json``) writes, allowed by their hashes and nothing else.

The study's Content-Security-Policy forbids inline style (``guards.CONTENT_SECURITY_POLICY``), and the plugin builds
its card, resize handle, blind-spot ball and square as HTML with ``style="..."``. CSP level 3 allows an exact
attribute value by its hash (``style-src-attr 'unsafe-hashes' 'sha256-...'``), so these declarations, and no
other, are applied. The values follow from the parameters ``experiment.js`` gives the plugin (``item_init_size``
250, a credit card's 85.6 x 53.98 mm, its 30-pixel ball) and replace the prompts that carry styles with our own;
``tests/study/test_browser_calibration.py`` runs the calibration under the policy and counts zero violations,
so a plugin update that writes another style fails there, not in a participant's browser.
"""

from __future__ import annotations

import base64
import hashlib

CHINREST_STYLE_ATTRIBUTES: tuple[str, ...] = (
    "width: 900px; margin: 0 auto;",
    "border: none; height: 158px; width: 250px; margin: 5px auto; background-color: #ddd; position: relative; ",
    "cursor: nwse-resize; background-color: none; width: 25px; height: 25px; border: 5px solid red; "
    "border-left: 0; border-top: 0; position: absolute; bottom: 0; right: 0;",
    "height:100px; position:relative;",
    "display:none;",
    "display:inline; color: red",
    "position: absolute; background-color: #f00; width: 30px; height: 30px; border-radius:30px;",
    "position: absolute; background-color: #000; width: 30px; height: 30px;",
)


def hash_source(value: str) -> str:
    """A CSP hash source expression for ``value``: ``'sha256-<base64>'``."""
    return f"'sha256-{base64.b64encode(hashlib.sha256(value.encode()).digest()).decode()}'"


STYLE_SRC_ATTR = "style-src-attr 'unsafe-hashes' " + " ".join(hash_source(v) for v in CHINREST_STYLE_ATTRIBUTES)
