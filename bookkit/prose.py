"""Find numbers typed into a page's prose: every number a reproduce page shows must be computed.

A number in the Markdown of a reproduce notebook is allowed when it is

* glued from the notebook (``{glue:text}`name```, ``{glue:}`name```), so a re-run changes it;
* the paper's, marked with the ``{paper}`` role together with its source, e.g.
  ``the paper reports {paper}`0.81 (Table 2)```;
* inside math (``$...$``, ``$$...$$``), inline code, a code cell, a role or a link target;
* a reference (Fig. 3, Table 2, Eq. 4, Section 6, Theorem 1, Appendix B.2, ...), a year, a list
  enumerator, or part of a name (GPT-2, 1-WL, L2, OLMo-7B, top-5).

Everything else is reported by :func:`typed_numbers`, which the repository's tests run on every
``reproduce.md``. Spelled-out numbers ("three seeds") are not caught: write only what is checked.
"""

from __future__ import annotations

import re

__all__ = ["typed_numbers", "prose_lines"]

_FENCE = re.compile(r"^(\s*)(`{3,}|:{3,}|~{3,})(.*)$")
# fences whose body is not prose
_NON_PROSE = re.compile(r"^\{?(code-cell|code|code-block|literalinclude|math|raw|glue:figure|eval-rst)\}?"
                        r"|^(python|py|bash|sh|text|console|yaml|json|toml|ipython3?)?\s*$")
_ROLE = re.compile(r"\{[A-Za-z0-9:_-]+\}`[^`]*`")
_CODE = re.compile(r"``?[^`]+``?")
_DMATH = re.compile(r"\$\$.*?\$\$", re.S)
_MATH = re.compile(r"(?<!\\)\$[^$\n]+?(?<!\\)\$")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_LABEL = re.compile(r"^\s*\([A-Za-z0-9:_-]+\)=\s*$")
_HTML = re.compile(r"<[^>]+>")
_ENUM = re.compile(r"^\s*(\d+[.)]|[-*+])\s+")
_REF_WORDS = (r"(?:Fig(?:ure)?s?|Tab(?:le)?s?|Eqs?|Equations?|Sec(?:tion)?s?|§|App(?:endix)?|Appendices|"
              r"Thm|Theorems?|Lemmas?|Cor(?:ollary)?|Corollaries|Prop(?:osition)?s?|Alg(?:orithm)?s?|"
              r"Chapters?|Ch|Parts?|Exercises?|Steps?|Def(?:inition)?s?|Assumptions?|Examples?|Remarks?|"
              r"Stages?|Lines?|Rows?|Columns?|Phases?|Conditions?|Claims?|Cases?|Props?)")
_REF = re.compile(_REF_WORDS + r"\.?\s*(?:[A-Z]?\d+(?:\.\d+)*[a-z]?)(?:\s*(?:,|and|or|-|–|to|&)\s*[A-Z]?\d+(?:\.\d+)*[a-z]?)*")
_YEAR = re.compile(r"(?<![\w.])(?:19|20)\d\d(?![\w.])")
# a number standing alone (not glued to letters by a hyphen/underscore, e.g. GPT-2, 1-WL, x_1)
_NUMBER = re.compile(r"(?<![\w\-./])[-+−±]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?(?:[x×%])?(?![\w\-/]|\.\d)")


def _strip_front_matter(text: str) -> str:
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end != -1:
            return "\n" * text[:end + 4].count("\n") + text[end + 4:]
    return text


def prose_lines(markdown: str) -> list[tuple[int, str]]:
    """The Markdown lines of a MyST page that are prose (1-based line numbers), fences removed."""
    text = _strip_front_matter(markdown)
    out: list[tuple[int, str]] = []
    stack: list[tuple[str, bool]] = []  # (fence marker, is prose)
    for number, line in enumerate(text.splitlines(), start=1):
        m = _FENCE.match(line)
        if m:
            marker, info = m.group(2), m.group(3).strip()
            if stack and marker[0] == stack[-1][0][0] and len(marker) >= len(stack[-1][0]) and not info:
                stack.pop()
                continue
            if not stack or stack[-1][1]:
                stack.append((marker, not _NON_PROSE.match(info)))
                continue
        if stack and not stack[-1][1]:
            continue
        if line.lstrip().startswith(":") and re.match(r"^\s*:[\w-]+:", line):
            continue  # directive options such as :label: or :width:
        if _LABEL.match(line) or line.lstrip().startswith("+++") or line.lstrip().startswith("%"):
            continue
        out.append((number, line))
    return out


def typed_numbers(markdown: str) -> list[tuple[int, str, str]]:
    """Numbers in the prose of ``markdown`` that are neither glued, the paper's, nor exempt.

    Returns ``(line number, number, line)`` triples; an empty list means the page is clean.
    """
    lines = prose_lines(markdown)
    joined = "\n".join(line for _, line in lines)
    # display math may span lines: blank it while keeping the line structure
    joined = _DMATH.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), joined)
    found = []
    for (number, _), line in zip(lines, joined.split("\n")):
        clean = _ENUM.sub(" ", line)
        for pattern in (_ROLE, _CODE, _MATH, _LINK_TARGET, _HTML, _REF, _YEAR):
            clean = pattern.sub(" ", clean)
        for m in _NUMBER.finditer(clean):
            found.append((number, m.group(0), line.strip()))
    return found
