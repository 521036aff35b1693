r"""MyST as plain Jupyter Markdown: the one converter behind the Colab copies and the course releases.

The book's notebooks are MyST Markdown; Jupyter and Colab render CommonMark with ``$``/``$$`` math and
nothing else. :class:`Chapter` holds what a conversion needs to know about a chapter (its labels, the
bibliography, the TeX macros of ``_config.yml``); :class:`Page` converts one notebook's Markdown cells
into *segments*, Markdown or code:

==============================  ======================================================================
MyST                            plain Jupyter
==============================  ======================================================================
``$$ ... $$ (label)``           display math numbered with ``\tag{n}`` (equations numbered per notebook)
``\R``, ``\E`` (config macros)  their expansion (``\mathbb{R}``), which KaTeX and MathJax know
admonitions                     a block quote opened by the bold title
``{prf:theorem}`` etc.          a block quote opened by "**Theorem n (title).**"
``{exercise}``                  "**Exercise n (title).**" (numbered as on the website)
``{solution}``                  a ``<details>`` block "Solution to Exercise n" (dropped in a release)
``{literalinclude}``            a code cell that shows the installed library's source (Colab copies)
``{glue:text}`name```           the marker ``⟨name⟩``; the cell after the paragraph shows it with
                                this run's value (:func:`companion_lib.common.glue.show_glued`)
``{cite}`key```                 "(Author, year)", and the entry in a "References" cell at the end
``{eq}``, ``{prf:ref}``,        the number or title they point to, with the notebook's name when it is
``{ref}``, ``{numref}``,        another notebook of the chapter
``{doc}``
``{paper}`x```, ``{n}`x```      ``x``
``(label)=``, directive options, dropped
``%`` comments
``[text](page.md)``             ``[text](page.ipynb)`` for a notebook of the chapter
==============================  ======================================================================

:func:`myst_to_markdown` is the text-only form (code segments are dropped) that the course uses for
exercise statements and :mod:`bookkit.student` re-exports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

__all__ = ["GLUE_MARKER", "RAW_MYST", "Chapter", "Label", "Page", "Segment", "find_raw_myst", "myst_to_markdown",
           "python_string", "glue_names"]

ROLE = re.compile(r"\{(?P<name>[\w:.-]+)\}`(?P<body>[^`]*)`")
DIRECTIVE_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:.-]+)\}[ \t]*(?P<arg>.*)$")
PLAIN_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})(?![`~{])")
TARGET = re.compile(r"^\(\s*(?P<label>[\w:.-]+)\s*\)=\s*$")
EQ_LABEL = re.compile(r"^(?P<pre>.*?)\$\$\s*\((?P<label>[\w:.-]+)\)\s*$")
OPTION = re.compile(r"^\s*:(?P<key>[\w-]+):\s*(?P<value>.*)$")
HEADING = re.compile(r"^\s*(?P<hashes>#{1,6})\s+(?P<text>.*?)\s*#*\s*$")
EXERCISE_NUMBER = re.compile(r"^\s*(?:#{1,6}\s+|\*\*)Exercise\s+(\d+)\b")
_ROLE_OR_CODE = re.compile(r"\{(?P<name>[\w:.-]+)\}`(?P<body>[^`]*)`|(?P<code>`+)[^`]+?(?P=code)")


def _last_unclosed_tick(line: str) -> int:
    """Index of the backtick in ``line`` that opens a code span not closed on this line."""
    spans = [m.span() for m in _ROLE_OR_CODE.finditer(line)]
    ticks = [i for i, c in enumerate(line) if c == "`" and not any(a <= i < b for a, b in spans)]
    return ticks[-1] if ticks else len(line)


MD_LINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>[^()\s]+)\)")
#: the marker of a glued number (companion_lib.common.glue.MARKER matches it; a test checks)
GLUE_MARKER = "⟨{}⟩"
_GLUE_MARKER_RX = re.compile(r"⟨([A-Za-z_][A-Za-z0-9_.-]*)⟩")

#: MyST that Jupyter and Colab show as raw text (a test fails on any of it in a Colab copy or a release)
RAW_MYST = re.compile(r"\{[\w:.-]+\}`|^[ \t]*(?:`{3,}|:{3,})\{[\w:.-]+\}|^[ \t]*\([\w:.-]+\)=[ \t]*$|^\+\+\+", re.M)

ADMONITIONS = {"note", "tip", "hint", "important", "warning", "attention", "caution", "danger", "error",
               "seealso", "admonition", "margin", "sidebar", "topic"}
PROOF_KINDS = {"theorem", "lemma", "proposition", "corollary", "definition", "remark", "conjecture", "example",
               "axiom", "criterion", "observation", "property", "assumption", "algorithm", "notation"}
DROPPED = {"glue", "glue:figure", "glue:any", "glue:math", "tableofcontents", "toctree", "notebook-runtimes",
           "runtime-table", "claims-scoreboard", "part-chapters", "bibliography", "raw"}
PAGE_NAMES = {"index": "overview", "derive": "derivation", "implement": "implementation",
              "reproduce": "reproduction", "exercises": "exercises"}


@dataclass
class Label:
    """Something a cross-reference can point to: its kind, number (if numbered), title and notebook."""

    kind: str            # "equation", "theorem", ..., "exercise", "section", "figure"
    number: int | None
    title: str
    notebook: str        # the stem of the notebook that defines it ("derive")

    def text(self) -> str:
        if self.kind == "equation":
            return f"({self.number})"
        if self.kind == "section":
            return f"“{self.title}”"
        name = self.kind.capitalize()
        return f"{name} {self.number}" if self.number is not None else (self.title or name)


@dataclass
class Segment:
    """A piece of a converted notebook: Markdown, or code with its cell metadata."""

    kind: str                      # "markdown", "code" or (course sources) "answer"
    source: str
    metadata: dict = field(default_factory=dict)


_ACCENTS = {"\"": "\u0308", "'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303", "c": "\u0327",
            "v": "\u030c", "u": "\u0306", "=": "\u0304", ".": "\u0307", "H": "\u030b"}
_LETTERS = {"ss": "ß", "o": "ø", "O": "Ø", "ae": "æ", "AE": "Æ", "aa": "å", "AA": "Å", "l": "ł", "L": "Ł", "i": "ı"}


@lru_cache(maxsize=None)
def _latex_text(text: str) -> str:
    """BibTeX text as plain text: accents (``{\\"o}``, ``\\'e``) as Unicode, protective braces dropped."""
    import unicodedata

    def accent(m: re.Match) -> str:
        return unicodedata.normalize("NFC", m.group(2) + _ACCENTS[m.group(1)])

    text = re.sub(r"\\([\"'`^~=.]|[cvuH](?=[{ ]))\s*\{?([A-Za-z])\}?", accent, text)
    text = re.sub(r"\\(ss|ae|AE|aa|AA|o|O|l|L|i)(?![A-Za-z])\s?", lambda m: _LETTERS[m.group(1)], text)
    text = text.replace("--", "–").replace("\\&", "&").replace("~", " ")
    return re.sub(r"[{}]", "", text).strip()


class Bibliography:
    """The book's ``references.bib``: citation labels "(Author, year)" and reference-list entries."""

    def __init__(self, path: Path | None):
        self.entries = {}
        if path is not None and Path(path).exists():
            from pybtex.database import parse_file

            self.entries = dict(parse_file(str(path)).entries)

    def _lasts(self, key: str) -> list[str]:
        entry = self.entries[key]
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        return [_latex_text(" ".join(p.prelast_names + p.last_names)) for p in people]

    def authors_short(self, key: str) -> str:
        if key not in self.entries:
            return key
        lasts = self._lasts(key)
        if not lasts:
            return _latex_text(self.entries[key].fields.get("title", key))
        if len(lasts) == 1:
            return lasts[0]
        if len(lasts) == 2:
            return f"{lasts[0]} and {lasts[1]}"
        return f"{lasts[0]} et al."

    def year(self, key: str) -> str:
        return self.entries[key].fields.get("year", "n.d.") if key in self.entries else "?"

    def cite(self, role: str, keys: list[str]) -> str:
        variant = role.split(":", 1)[1] if ":" in role else "p"
        if variant in ("t", "ts"):
            return "; ".join(f"{self.authors_short(k)} ({self.year(k)})" for k in keys)
        if variant == "author":
            return "; ".join(self.authors_short(k) for k in keys)
        if variant == "year":
            return "; ".join(self.year(k) for k in keys)
        return "(" + "; ".join(f"{self.authors_short(k)}, {self.year(k)}" for k in keys) + ")"

    def reference(self, key: str) -> str:
        if key not in self.entries:
            return f"{key} (not in the bibliography)"
        entry = self.entries[key]
        people = entry.persons.get("author") or []
        names = []
        for p in people:
            initials = " ".join(f"{_latex_text(n)[0]}." for n in p.first_names + p.middle_names if _latex_text(n))
            last = _latex_text(" ".join(p.prelast_names + p.last_names))
            names.append(f"{last}, {initials}" if initials else last)
        authors = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1] if names else ""
        f = entry.fields
        venue = f.get("booktitle") or f.get("journal") or f.get("howpublished") or f.get("publisher") or ""
        extra = ", ".join(x for x in (f"vol. {f['volume']}" if "volume" in f else "",
                                       f"no. {f['number']}" if "number" in f else "",
                                       f"pp. {f['pages'].replace('--', '–')}" if "pages" in f else "") if x)
        parts = [f"{authors} ({f.get('year', 'n.d.')}).", f"{_latex_text(f.get('title', key))}."]
        if venue:
            parts.append(f"*{_latex_text(venue)}*" + (f", {extra}." if extra else "."))
        url = f.get("url")
        if url:
            parts.append(f"<{url}>")
        return " ".join(parts)


def _config_macros(root: Path) -> dict[str, str]:
    import yaml

    path = Path(root) / "_config.yml"
    if not path.exists():
        return {}
    config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    macros = (((config.get("sphinx") or {}).get("config") or {}).get("mathjax3_config") or {}) \
        .get("tex", {}).get("macros", {})
    return {name: (value[0] if isinstance(value, list) else value) for name, value in macros.items()}


class Chapter:
    """What converting one chapter's notebooks needs: its labels (collected from every notebook of the
    chapter, so that a reference to another notebook resolves), titles, bibliography and macros."""

    def __init__(self, folder: Path, root: Path | None = None, bibliography: Bibliography | None = None):
        import jupytext

        self.folder = Path(folder)
        root = Path(root) if root is not None else self.folder.parents[1]
        self.root = root
        self.bib = bibliography if bibliography is not None else Bibliography(root / "book" / "references.bib")
        self.macros = _config_macros(root)
        self.labels: dict[str, Label] = {}
        self.titles: dict[str, str] = {}
        self.notebooks: dict[str, object] = {}
        for md in sorted(self.folder.glob("*.md")):
            text = md.read_text(encoding="utf-8")
            title = next((m.group("text") for m in map(HEADING.match, text.splitlines())
                          if m and len(m.group("hashes")) == 1), md.stem)
            self.titles[md.stem] = ROLE.sub(lambda m: m.group("body"), title)
            if md.stem == "index" or "format_name: myst" not in text.split("\n---", 1)[0]:
                continue
            nb = jupytext.reads(text, fmt="md:myst")
            self.notebooks[md.stem] = nb
            page = Page(self, md.stem, collect=True)
            page.convert_notebook_cells(nb)
            self.labels.update(page.defined)

    def page(self, stem: str, target: str = "colab") -> "Page":
        return Page(self, stem, target=target)


class Page:
    """The conversion of one notebook's Markdown. ``target``: ``"colab"`` (solutions in ``<details>``),
    ``"release"`` (solutions dropped) or ``"course"`` (each solution an ``"answer"`` segment)."""

    def __init__(self, chapter: Chapter | None, stem: str, target: str = "colab", collect: bool = False):
        self.chapter = chapter
        self.stem = stem
        self.target = target
        self.collect = collect
        self.defined: dict[str, Label] = {}
        self.counters: dict[str, int] = {}
        self.cited: list[str] = []
        self.glued: list[str] = []
        self.numbering = {"current": 0, "section": None, "bold": None, "used": set()}
        self.pending_target: str | None = None
        self.code_open = False   # an inline code span opened on an earlier line of the paragraph is still open
        self._deferred: list[Segment] = []

    # -- labels and references ---------------------------------------------------------------------
    def _next(self, kind: str) -> int:
        self.counters[kind] = self.counters.get(kind, 0) + 1
        return self.counters[kind]

    def define(self, label: str | None, kind: str, number: int | None, title: str = "") -> None:
        if label:
            self.defined[label] = Label(kind, number, title, self.stem)

    def _lookup(self, label: str) -> Label | None:
        if label in self.defined:
            return self.defined[label]
        if self.chapter is not None:
            return self.chapter.labels.get(label)
        return None

    def _where(self, lab: Label) -> str:
        return "" if lab.notebook == self.stem else f" in *{lab.notebook}.ipynb*"

    def _doc_text(self, target: str) -> str:
        stem = target.strip().removesuffix(".md").removesuffix(".ipynb").rsplit("/", 1)[-1]
        title = self.chapter.titles.get(stem) if self.chapter is not None else None
        if self.chapter is not None and stem in self.chapter.notebooks:
            return f"*{title or stem}* ({stem}.ipynb)"
        if title:
            return f"*{title}*"
        return f"the chapter's {PAGE_NAMES.get(stem, stem)} page"

    def role(self, match: re.Match) -> str:
        name, body = match.group("name"), match.group("body")
        explicit = re.match(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", body, re.S)
        if name == "math":
            return f"${body}$"
        if name.startswith("glue"):
            self.glued.append(body.strip())
            return GLUE_MARKER.format(body.strip())
        if name.startswith("cite"):
            keys = [k.strip() for k in body.split(",") if k.strip()]
            for k in keys:
                if k not in self.cited:
                    self.cited.append(k)
            bib = self.chapter.bib if self.chapter is not None else Bibliography(None)
            return bib.cite(name, keys)
        if name == "doc":
            return explicit.group("text") if explicit else self._doc_text(body)
        if name in ("eq", "ref", "numref", "prf:ref", "any", "label"):
            if explicit and name != "numref":
                return explicit.group("text")
            target = explicit.group("target") if explicit else body
            lab = self._lookup(target.strip())
            if lab is None:
                return f"*{target}*"
            if name == "numref" and explicit:
                return explicit.group("text").replace("%s", str(lab.number)).replace("{number}", str(lab.number))
            return lab.text() + self._where(lab)
        return body  # {paper}, {n}, {term}, {abbr}, {download}, {sub}, {sup} and anything else: the text

    def inline(self, line: str) -> str:
        """Roles, macros and links of one line of prose (inline code spans are left alone)."""
        def sub(match: re.Match) -> str:
            if match.group("name") is None:
                return match.group(0)        # an inline code span
            return self.role(match)

        text = _ROLE_OR_CODE.sub(sub, line)
        text = self.macros(text)
        return MD_LINK.sub(self._link, text)

    def macros(self, text: str) -> str:
        if self.chapter is None:
            return text
        for name, value in self.chapter.macros.items():
            text = re.sub(r"\\" + re.escape(name) + r"(?![A-Za-z])", lambda _m, v=value: v, text)
        return text

    def _link(self, match: re.Match) -> str:
        text, target = match.group("text"), match.group("target")
        if target.startswith("#"):
            return text
        if re.match(r"^[a-z]+:", target):
            return match.group(0)
        path, _, anchor = target.partition("#")
        if path.endswith(".md"):
            stem = Path(path).stem
            same_chapter = "/" not in path
            if (same_chapter and self.chapter is not None and stem in self.chapter.notebooks) or \
                    (not same_chapter and stem != "index"):
                path = path[:-3] + ".ipynb"
        return f"[{text}]({path}{'#' + anchor if anchor else ''})"

    # -- blocks ------------------------------------------------------------------------------------
    def convert_markdown(self, text: str) -> list[Segment]:
        """One Markdown cell as segments (Markdown, and code cells for included library source)."""
        segments: list[Segment] = []
        buffer: list[str] = []

        def flush():
            body = "\n".join(buffer).strip("\n")
            buffer.clear()
            if body.strip():
                segments.append(Segment("markdown", body))

        lines = text.split("\n")
        i, in_math = 0, False
        self.code_open = False
        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            directive = DIRECTIVE_OPEN.match(stripped) if not in_math else None
            plain = PLAIN_FENCE.match(stripped) if not in_math else None
            if plain:
                j = i + 1
                while j < len(lines) and not lines[j].strip().startswith(plain.group("fence")):
                    j += 1
                buffer.extend(lines[i:j + 1])
                i = j + 1
                continue
            if directive:
                j, body, options = self._directive_extent(lines, i, directive.group("fence"))
                for segment in self.directive(directive.group("name"), directive.group("arg").strip(), body, options):
                    if segment.kind == "markdown":
                        buffer.append(segment.source)
                    else:
                        flush()
                        segments.append(segment)
                i = j + 1
                continue
            if not in_math:
                self._track_numbering(lines, i)
                target = TARGET.match(stripped)
                if target:
                    self.pending_target = target.group("label")
                    i += 1
                    continue
                if stripped.startswith("%") and not stripped.startswith("%%"):
                    i += 1   # a MyST comment
                    continue
                heading = HEADING.match(line)
                if heading and self.pending_target:
                    self.define(self.pending_target, "section", None, self.inline(heading.group("text")))
                    self.pending_target = None
            buffer.append(self._math_line(line, in_math))
            if "$$" in line:
                closes_with_label = bool(EQ_LABEL.match(line)) and (in_math or EQ_LABEL.match(line).group("pre").count("$$") % 2 == 1)
                if closes_with_label:
                    in_math = False
                elif line.count("$$") % 2 == 1:
                    in_math = not in_math
            i += 1
        flush()
        return segments

    def _math_line(self, line: str, in_math: bool) -> str:
        """One line of prose or display math; a labelled display gets its number as ``\\tag{n}``."""
        label = EQ_LABEL.match(line)
        if label and (in_math or label.group("pre").count("$$") % 2 == 1):
            n = self._next("equation")
            self.define(label.group("label"), "equation", n)
            pre = self.macros(label.group("pre")).rstrip()
            return f"{pre} \\tag{{{n}}}$$" if pre.strip().strip("$").strip() else f"{pre}\n\\tag{{{n}}}\n$$".lstrip("\n")
        if in_math or (line.strip().startswith("$$") and line.count("$$") % 2 == 1):
            return self.macros(line)
        return self._prose_line(line)

    def _prose_line(self, line: str) -> str:
        """:meth:`inline` of one prose line, for inline code spans that break across lines: the part of
        ``line`` that closes a span opened on an earlier line is left alone, and a span this line opens
        without closing stays open for the next (a blank line ends a paragraph, and any span with it)."""
        if not line.strip():
            self.code_open = False
            return line
        head = ""
        if self.code_open:
            close = line.find("`")
            if close < 0:
                return line
            head, line = line[:close + 1], line[close + 1:]
            self.code_open = False
        rest = _ROLE_OR_CODE.sub("", line)
        self.code_open = rest.count("`") % 2 == 1
        if self.code_open:   # convert only what comes before the unclosed span
            opening = _last_unclosed_tick(line)
            return head + self.inline(line[:opening]) + line[opening:]
        return head + self.inline(line)

    def _track_numbering(self, lines: list[str], i: int) -> None:
        state, line = self.numbering, lines[i]
        number = EXERCISE_NUMBER.match(line)
        heading = re.match(r"^\s*#{1,6}\s", line)
        if number:
            state["current"] = int(number.group(1))
            state["section" if heading else "bold"] = state["current"]
            if heading:
                state["bold"] = None
        elif heading:
            state["section"] = state["bold"] = None
        elif line.strip() and (i == 0 or not lines[i - 1].strip()):
            state["bold"] = None  # a new paragraph between a bold "Exercise N" and a box

    @staticmethod
    def _directive_extent(lines: list[str], i: int, fence: str) -> tuple[int, list[str], dict[str, str]]:
        j, depth = i + 1, 1
        while j < len(lines):
            inner = lines[j].strip()
            opened = DIRECTIVE_OPEN.match(inner)
            if opened and opened.group("fence") == fence:
                depth += 1
            elif inner == fence:
                depth -= 1
                if depth == 0:
                    break
            j += 1
        body = lines[i + 1:j]
        options: dict[str, str] = {}
        if body and body[0].strip() == "---":   # YAML options block
            end = next((k for k in range(1, len(body)) if body[k].strip() == "---"), 0)
            import yaml

            options = {str(k): str(v) for k, v in (yaml.safe_load("\n".join(body[1:end])) or {}).items()}
            body = body[end + 1:]
        while body and OPTION.match(body[0]):
            m = OPTION.match(body[0])
            options[m.group("key")] = m.group("value").strip()
            body = body[1:]
        return j, body, options

    def _body_text(self, body: list[str]) -> str:
        """A directive's body as Markdown (included code inside a box is shown as a code cell after it)."""
        segments = self.convert_markdown("\n".join(body))
        self._deferred.extend(s for s in segments if s.kind == "code")
        return "\n\n".join(s.source for s in segments if s.kind == "markdown").strip("\n")

    def directive(self, name: str, arg: str, body: list[str], options: dict[str, str]) -> list[Segment]:
        outer, self._deferred = getattr(self, "_deferred", []), []
        try:
            return self._directive(name, arg, body, options)
        finally:
            self._deferred = outer

    def _directive(self, name: str, arg: str, body: list[str], options: dict[str, str]) -> list[Segment]:
        label = options.get("label") or options.get("name")
        if name == "exercise":
            state = self.numbering
            announced = next((k for k in (state["section"], state["bold"]) if k is not None and k not in state["used"]),
                             None)
            n = announced if announced is not None else state["current"] + 1
            state["used"].add(n)
            state["current"], state["bold"] = max(state["current"], n), None
            self.define(label, "exercise", n, arg)
            title = f" ({self.inline(arg)})" if arg else ""
            # the heading or bold paragraph right before already says "Exercise n"
            head = (f"**{self.inline(arg)}.**\n\n" if arg else "") if announced is not None else \
                f"**Exercise {n}{title}.**\n\n"
            text = f"{head}{self._body_text(body)}"
            return [Segment("markdown", text), *self._deferred]
        if name == "solution":
            if self.target == "release":
                return []
            ref = self._lookup(arg.strip()) if arg else None
            of = f" to Exercise {ref.number}" if ref is not None and ref.kind == "exercise" else ""
            text = self._body_text(body)
            if self.target == "course":   # the model answer, for the instructor's answer cell
                number = ref.number if ref is not None and ref.kind == "exercise" else self.numbering["current"]
                return [Segment("answer", text, {"exercise": number}), *self._deferred]
            return [Segment("markdown", f"<details>\n<summary><b>Solution{of}</b></summary>\n\n{text}\n\n</details>"),
                    *self._deferred]
        if name == "math":
            n = self._next("equation") if label else None
            self.define(label, "equation", n)
            tag = f"\n\\tag{{{n}}}" if n else ""
            return [Segment("markdown", "$$\n" + self.macros("\n".join(body)).strip("\n") + tag + "\n$$")]
        if name in ("code-block", "code", "sourcecode"):
            return [Segment("markdown", f"```{arg}\n" + "\n".join(body) + "\n```")]
        if name == "literalinclude":
            return self.literalinclude(arg, options)
        if name in DROPPED:
            return []
        kind = name.split(":", 1)[1] if name.startswith("prf:") else None
        if kind == "proof":
            text = self._body_text(body)
            return [Segment("markdown", _quote(f"*Proof.* {text} ∎")), *self._deferred]
        if kind is not None:
            n = self._next(kind) if kind in PROOF_KINDS else None
            self.define(label, kind, n, arg)
            head = kind.capitalize() + (f" {n}" if n else "") + (f" ({self.inline(arg)})" if arg else "")
            text = self._body_text(body)
            return [Segment("markdown", _quote(f"**{head}.**\n\n{text}")), *self._deferred]
        if name in ADMONITIONS:
            title = self.inline(arg) if name == "admonition" and arg else name.capitalize()
            if name == "seealso" and not arg:
                title = "See also"
            text = self._body_text(body)
            return [Segment("markdown", _quote(f"**{title}.**\n\n{text}")), *self._deferred]
        if name in ("figure", "image"):
            caption = self._body_text(body)
            return [Segment("markdown", f"![{options.get('alt', '')}]({arg})\n\n{caption}".strip())]
        text = self._body_text(body)   # dropdown, div, card, ...: the content
        return [Segment("markdown", text), *self._deferred] if text else list(self._deferred)

    def literalinclude(self, arg: str, options: dict[str, str]) -> list[Segment]:
        """The included library source, shown live from the installed package: a small code cell that
        prints it (the Colab copy never goes stale when the library changes)."""
        path = Path(arg.strip())
        parts = [p for p in path.parts if p not in ("..", ".")]
        if "companion_lib" not in parts:
            return [Segment("markdown", f"*(The page includes the file `{arg}` here.)*")]
        parts = parts[parts.index("companion_lib"):]
        module = ".".join(parts).removesuffix(".py").removesuffix(".__init__")
        obj = options.get("pyobject")
        what = f"`{obj}` in `{'/'.join(parts)}`" if obj else f"`{'/'.join(parts)}`"
        lines = [f"#@title The library's code: {what.replace('`', '')}",
                 "import importlib, inspect",
                 "from IPython.display import Code, display",
                 f"_module = importlib.import_module({module!r})"]
        if obj:
            lines.append(f"_source = inspect.getsource(_module.{obj})")
        else:
            lines.append("_source = inspect.getsource(_module)")
            start = options.get("start-at") or options.get("start-after")
            end = options.get("end-before") or options.get("end-at")
            if start:
                start = start.strip().strip("\"'")
                after = "start-after" in options
                lines.append(f"_source = _source[_source.index({start!r}) + {len(start) if after else 0}:]")
            if end:
                end = end.strip().strip("\"'")
                lines.append(f"_source = _source[:_source.index({end!r}){' + ' + str(len(end)) if 'end-at' in options else ''}]")
        lines.append("display(Code(_source.rstrip(), language='python'))")
        return [Segment("code", "\n".join(lines), {"cellView": "form"})]

    def convert_notebook_cells(self, nb) -> None:
        """Walk the notebook once (to collect labels): Markdown converted, figure names numbered."""
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                self.convert_markdown(cell.source)
            elif cell.cell_type == "code":
                self.figure(cell)
                self.numbering["bold"] = None

    def figure(self, cell) -> Segment | None:
        """The caption of a code cell's figure (myst-nb's ``mystnb: figure:`` metadata) as Markdown."""
        fig = (cell.get("metadata", {}).get("mystnb") or {}).get("figure") or {}
        if not fig:
            return None
        n = self._next("figure")
        self.define(fig.get("name"), "figure", n)
        caption = fig.get("caption", "")
        if not caption:
            return None
        text = "\n\n".join(s.source for s in self.convert_markdown(caption.strip()) if s.kind == "markdown")
        return Segment("markdown", f"**Figure {n}.** {text}")

    def references(self) -> Segment | None:
        """A "References" Markdown cell listing the entries this notebook cited, in citation order."""
        if not self.cited or self.chapter is None:
            return None
        items = "\n".join(f"- {self.chapter.bib.reference(k)}" for k in self.cited)
        return Segment("markdown", f"## References\n\n{items}")


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line.strip() else ">" for line in text.strip("\n").split("\n"))


def glue_names(text: str) -> list[str]:
    """The glued names a converted Markdown text shows (markers ``⟨name⟩``), in order, without repeats."""
    return list(dict.fromkeys(_GLUE_MARKER_RX.findall(text)))


def glued_blocks(text: str) -> str:
    """The blocks (paragraphs, list items, quotes, tables, displays) of ``text`` that show a glued number."""
    blocks, current, fence, math = [], [], None, False
    for line in text.split("\n"):
        stripped = line.strip()
        if fence is None and not stripped and not math:
            if current:
                blocks.append("\n".join(current))
                current = []
            continue
        current.append(line)
        plain = PLAIN_FENCE.match(stripped)
        if fence is None and plain:
            fence = plain.group("fence")
        elif fence is not None and stripped.startswith(fence):
            fence = None
        elif fence is None and stripped.count("$$") % 2 == 1:
            math = not math
    if current:
        blocks.append("\n".join(current))
    return "\n\n".join(b for b in blocks if _GLUE_MARKER_RX.search(b))


def python_string(text: str) -> str:
    """``text`` as a Python string literal that reads like the Markdown (a raw triple-quoted string)."""
    for quote in ('"""', "'''"):
        if quote not in text and not text.endswith(("\\", quote[0])):
            return f"r{quote}{text}{quote}"
    return repr(text)


def myst_to_markdown(text: str, state: dict | None = None, target: str = "release") -> str:
    """MyST Markdown as plain Markdown that Jupyter and Colab render (text only: code segments dropped).

    ``{exercise}`` boxes are numbered as on the website: the number of the "Exercise N" heading or
    bold paragraph right before them, else the next number; pass the same ``state`` dict for every
    cell of a notebook.
    """
    page = Page(None, "", target=target)
    if state is not None:
        page.numbering = state
        state.setdefault("current", 0), state.setdefault("section", None), state.setdefault("bold", None)
        state.setdefault("used", set())
    return "\n\n".join(s.source for s in page.convert_markdown(text) if s.kind == "markdown")


def find_raw_myst(text: str) -> list[str]:
    """The lines of ``text`` that hold MyST syntax Jupyter would show raw."""
    return [line for line in text.split("\n") if RAW_MYST.search(line)]
