r"""Find numbers typed into a page: every number a page shows is computed and glued, or is the paper's.

A number in the Markdown of any chapter page (overview, derive, implement, reproduce, exercises: prose,
Markdown tables, directive bodies such as theorems, exercises and solutions, and figure captions, including
the captions in a code cell's ``mystnb`` metadata) is allowed when it is

* glued from a notebook (``{glue:text}`name```, ``{glue:}`name```, or ``{glue:text}`reproduce.md::name```
  from another page of the chapter), so a re-run changes it;
* the paper's, marked with the ``{paper}`` role *together with its source* (a figure, table, section,
  appendix, equation, theorem, the abstract or the official code), e.g. ``{paper}`0.81 (Table 2)```;
* inside math that is more than a lone number (``$k = 4$``, ``$10^{-3}$``; but ``$0.93$`` alone is a typed
  number), inline code, a code cell, another role or a link target;
* outside reproduce pages, marked with the ``{n}`` role as a number *of the text* rather than a result: a
  definition, the steps of an argument, the size of a toy input shown in code next to it
  (``in {n}`four` steps``); :func:`n_roles` lists them, and a reproduce page must not use it;
* a reference (Fig. 3, Table 2, Eq. 4, Section 6, Theorem 1, Appendix B.2, Exercise 3, Part II, ...), a
  numbered heading, a
  year in a citation (``(2024)``, ``in 2023``), a list enumerator, or part of a name (GPT-2, 1-WL, L2,
  OLMo-7B, top-5, 3D).

Everything else is reported by :func:`typed_numbers`: digits (``48``, ``0.93``, ``25.7%``), digits with a
unit or suffix (``30s``, ``64k``, ``10x``, ``1.5-fold``, ``3-layer``, ``5th``), Unicode digits (``10⁵``,
``½``) and numbers written as words (``seven``, ``two thirds``, ``a dozen``; "one" is not flagged: it is
mostly a pronoun). :func:`paper_roles_without_source` reports ``{paper}`` roles that do not say where the
number comes from. The repository's tests run both on every chapter page.
"""

from __future__ import annotations

import re

__all__ = ["typed_numbers", "prose_lines", "paper_roles_without_source", "n_roles", "NUMBER_WORDS"]

_FENCE = re.compile(r"^(\s*)(`{3,}|:{3,}|~{3,})(.*)$")
# fences whose body is not prose
_NON_PROSE = re.compile(r"^\{?(code-cell|code|code-block|literalinclude|math|raw|eval-rst|tableofcontents|"
                        r"notebook-runtimes|runtime-table|claims-scoreboard|part-chapters)\}?"
                        r"|^(python|py|bash|sh|text|console|yaml|json|toml|ipython3?)?\s*$")
_CODE_CELL = re.compile(r"^\{?code-cell\}?")
_ROLE = re.compile(r"\{[A-Za-z0-9:_-]+\}`[^`]*`")
_PAPER_ROLE = re.compile(r"\{paper\}`([^`]*)`")
_N_ROLE = re.compile(r"\{n\}`([^`]*)`")
_CODE = re.compile(r"``?[^`]+``?")
_DMATH = re.compile(r"\$\$.*?\$\$", re.S)
_MATH = re.compile(r"(?<!\\)\$([^$\n]+?)(?<!\\)\$")
_LONE_NUMBER_MATH = re.compile(r"^\s*[-+−±]?\s*\d[\d,]*(?:\.\d+)?\s*(?:\\?%|\\times)?\s*$")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_LABEL = re.compile(r"^\s*\([A-Za-z0-9:_-]+\)=\s*$")
_HTML = re.compile(r"<[^>]+>")
_ENUM = re.compile(r"^\s*(\d+[.)]|[-*+]|\|)\s+")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_REF_WORDS = (r"(?:Fig(?:ure)?s?|Tab(?:le)?s?|Eqs?|Equations?|Sec(?:tion)?s?|§|App(?:endix)?|Appendices|"
              r"Thm|Theorems?|Lemmas?|Cor(?:ollary)?|Corollaries|Prop(?:osition)?s?|Alg(?:orithm)?s?|"
              r"Chapters?|Ch|Parts?|Exercises?|Steps?|Def(?:inition)?s?|Assumptions?|Examples?|Remarks?|"
              r"Stages?|Lines?|Phases?|Conditions?|Claims?|Cases?|Props?|Listings?|Eq\.)")
_ITEM = r"(?:[A-Z]?\d+(?:\.\d+)*[a-z]?|\([A-Z]?\d+(?:\.\d+)*[a-z]?\)|[IVX]+\b)"
_REF = re.compile(r"\b" + _REF_WORDS + r"\.?\s*" + _ITEM + r"(?:\s*(?:,|and|or|-|–|to|&)\s*" + _ITEM + r")*")
_HEADING_NUMBER = re.compile(r"^\s*#{1,6}\s+\d+(?:\.\d+)*\.?(?=\s)")
_YEAR = re.compile(r"(?:(?<=\()|(?<=\bin )|(?<=\bsince )|(?<=\bof )|(?<=, )|(?<=ICLR )|(?<=ICML )|(?<=CVPR )|"
                   r"(?<=ECCV )|(?<=ICCV )|(?<=EMNLP )|(?<=AAAI )|(?<=COLT )|(?<=TMLR )|(?<=NeurIPS )|(?<=IJCAI )|"
                   r"(?<=ACL ))(?:19[5-9]\d|20[0-3]\d)(?=[),;.:\s]|$)")
# names: a digit glued to letters on its left (GPT-2, L2, x_1, top-5, OLMo-7B), "1-WL"-like prefixes, 2D/3D
_NAME = re.compile(r"[A-Za-z][A-Za-z_]*[-_]?\d[\w.-]*|\b\d+-[A-Z][\w-]*|\b[123]D\b|\b[A-Z]+\d+[A-Za-z]*\b")
_UNICODE_NUMBER = re.compile(r"[⁰¹²³⁴⁵⁶⁷⁸⁹½¼¾⅓⅔⅛]")
# a number standing alone, or with a unit or suffix glued to it
_NUMBER = re.compile(r"(?<![\w./])[-+−±]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"
                     r"(?:%|×|x\b|(?:-|\s?)?(?:fold|times)\b|-[a-z][a-z-]*|(?:s|ms|min|h|k|K|M|B|G|GB|MB|GiB|MiB|"
                     r"KiB|px|th|st|nd|rd)\b)?(?![\w/]|\.\d)")
NUMBER_WORDS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
                "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty",
                "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "hundred", "hundreds",
                "thousand", "thousands", "million", "millions", "billion", "dozen", "dozens", "twice", "thrice",
                "tenfold", "twofold", "threefold", "fourfold", "fivefold", "hundredfold")
_FRACTION = r"(?:a|one|two|three|four|five|six|seven|eight|nine)\s+(?:half|halves|thirds?|quarters?|fifths?|tenths?)"
_WORDS = re.compile(r"\b(?:" + _FRACTION + r"|(?:" + "|".join(NUMBER_WORDS) + r")(?:-(?:" +
                    "|".join(NUMBER_WORDS) + r"|one))?)\b", re.I)
_SOURCE = re.compile(r"\b(?:fig(?:ure)?s?|tab(?:le)?s?|sec(?:tion)?s?|app(?:endix)?|appendices|eqs?|equations?|"
                     r"thm|theorems?|lemmas?|corollar(?:y|ies)|prop(?:osition)?s?|alg(?:orithm)?s?|def(?:inition)?s?|"
                     r"abstract|introduction|conclusions?|caption|official|readme|repository|notebook|code|"
                     r"discussion|text|footnote|page)\b|§", re.I)


def _strip_front_matter(text: str) -> str:
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end != -1:
            return "\n" * text[:end + 4].count("\n") + text[end + 4:]
    return text


def _caption_lines(body: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The caption text in the YAML header of a code cell (``mystnb: figure: caption: |`` or ``caption: ...``)."""
    out, inside, indent = [], False, 0
    if not body or body[0][1].strip() != "---":
        return out
    for number, line in body[1:]:
        if line.strip() == "---":
            break
        stripped = line.lstrip()
        current = len(line) - len(stripped)
        if inside:
            if stripped and current <= indent:
                inside = False
            else:
                out.append((number, line))
                continue
        m = re.match(r"^(\s*)caption:\s*(.*)$", line)
        if m:
            indent = len(m.group(1))
            rest = m.group(2).strip()
            if rest in ("|", ">", "|-", ">-", ""):
                inside = True
            else:
                out.append((number, rest.strip("'\"")))
    return out


def prose_lines(markdown: str, captions: bool = True) -> list[tuple[int, str]]:
    """The lines of a MyST page that a reader reads as prose (1-based line numbers): Markdown text, tables,
    directive bodies and options-free admonitions, and (``captions``) figure captions of code cells; code,
    math blocks and directive options removed."""
    text = _strip_front_matter(markdown)
    out: list[tuple[int, str]] = []
    stack: list[tuple[str, bool, bool]] = []  # (fence marker, is prose, is a code cell)
    cell: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        m = _FENCE.match(line)
        if m:
            marker, info = m.group(2), m.group(3).strip()
            if stack and marker[0] == stack[-1][0][0] and len(marker) >= len(stack[-1][0]) and not info:
                _, _, is_cell = stack.pop()
                if is_cell and captions:
                    out += _caption_lines(cell)
                    cell = []
                continue
            if not stack or stack[-1][1]:
                stack.append((marker, not _NON_PROSE.match(info), bool(_CODE_CELL.match(info))))
                continue
        if stack and not stack[-1][1]:
            if stack[-1][2]:
                cell.append((number, line))
            continue
        if line.lstrip().startswith(":") and re.match(r"^\s*:[\w-]+:", line):
            continue  # directive options such as :label: or :width:
        if _LABEL.match(line) or line.lstrip().startswith("+++") or line.lstrip().startswith("%"):
            continue
        if _TABLE_RULE.match(line):
            continue
        out.append((number, line))
    return out


def _blank(pattern: re.Pattern, text: str, keep=None) -> str:
    def repl(m):
        if keep is not None and keep(m):
            return m.group(0)
        return " " * len(m.group(0))
    return pattern.sub(repl, text)


def typed_numbers(markdown: str) -> list[tuple[int, str, str]]:
    """Numbers in the prose of ``markdown`` (tables, directive bodies and figure captions included; digits,
    number words, suffixes, lone numbers in math) that are neither glued, the paper's, nor exempt.

    Returns ``(line number, number, line)`` triples; an empty list means the page is clean.
    """
    lines = prose_lines(markdown, captions=True)
    joined = "\n".join(line for _, line in lines)
    # display math may span lines: blank it while keeping the line structure
    joined = _DMATH.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), joined)
    found = []
    for (number, _), line in zip(lines, joined.split("\n")):
        clean = _HEADING_NUMBER.sub(" ", line)
        clean = _ENUM.sub(" ", clean)
        clean = clean.replace("|", " ")
        # a lone number in math is a typed number: keep it visible (without the dollars) for the scan
        clean = _MATH.sub(lambda m: f" {m.group(1)} " if _LONE_NUMBER_MATH.match(m.group(1)) else
                          " " * len(m.group(0)), clean)
        for pattern in (_ROLE, _CODE, _LINK_TARGET, _HTML, _REF, _YEAR, _NAME):
            clean = _blank(pattern, clean)
        for pattern in (_NUMBER, _UNICODE_NUMBER, _WORDS):
            for m in pattern.finditer(clean):
                found.append((number, m.group(0), line.strip()))
    return found


def paper_roles_without_source(markdown: str) -> list[tuple[int, str]]:
    """``{paper}`...``` roles whose content does not name where the number comes from (a figure, table,
    section, appendix, equation, theorem, the abstract or the official code): ``(line, content)`` pairs."""
    out = []
    for number, line in prose_lines(markdown):
        for m in _PAPER_ROLE.finditer(line):
            if not _SOURCE.search(m.group(1)):
                out.append((number, m.group(1)))
    return out


def n_roles(markdown: str) -> list[tuple[int, str]]:
    """``{n}`...``` roles (numbers of the text, not results) in the prose: ``(line, content)`` pairs."""
    return [(number, m.group(1)) for number, line in prose_lines(markdown) for m in _N_ROLE.finditer(line)]
