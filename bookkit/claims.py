"""A claims table as it travels: the JSON that :class:`companion_lib.common.ClaimTable` embeds in its own HTML.

A reproduce notebook displays its claims table once; the displayed HTML carries the table's JSON
(:meth:`~companion_lib.common.ClaimTable.to_dict`) in a ``<script type="application/json"
class="claims-data">`` element. Every reader takes that one encoding: the scoreboard (from the page the
build renders, :mod:`bookkit.bookpages`), the site check (from the built HTML) and ``make reseed`` (from
the executed notebook). Nothing parses the visible table back.
"""

from __future__ import annotations

import json
import re

from companion_lib.common.claims import CLAIMS_DATA_CLASS

__all__ = ["claims_from_html", "claims_from_notebook", "rows_from_html"]

_SCRIPT = re.compile(r'<script type="application/json" class="' + re.escape(CLAIMS_DATA_CLASS) + r'">(.*?)</script>',
                     re.S)


def claims_from_html(text: str) -> dict | None:
    """The last claims table embedded in ``text`` (HTML), as its JSON dict, or None when there is none."""
    found = _SCRIPT.findall(text or "")
    if not found:
        return None
    data = json.loads(found[-1].replace("<\\/", "</"))
    if not isinstance(data, dict) or "claims" not in data:
        raise ValueError("the embedded claims data has no 'claims' list")
    return data


def rows_from_html(text: str) -> list[dict] | None:
    """The rows of the last claims table embedded in ``text``, or None."""
    data = claims_from_html(text)
    return None if data is None else list(data["claims"])


def claims_from_notebook(nb) -> dict | None:
    """The last claims table displayed in an executed notebook (its JSON), or None."""
    found = None
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            html = output.get("data", {}).get("text/html")
            if html is not None:
                data = claims_from_html("".join(html) if isinstance(html, list) else html)
                found = data if data is not None else found
    return found
