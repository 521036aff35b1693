"""The Colab copies: one plain-Jupyter ``.ipynb`` (no outputs, deterministic cell ids) beside every chapter notebook.

:func:`sync_notebooks` puts the one Colab setup cell (built from ``_config.yml``'s repository URL and the
package version, :func:`colab_setup_source`) at the top of every chapter notebook and writes the paired
``.ipynb`` (:func:`paired_notebook`); ``--check`` only reports what is out of date.

A Colab copy is what Jupyter and Colab can render and run without the book's toolchain:

* MyST becomes plain Markdown (:mod:`bookkit.myst`): math kept (labelled equations numbered), boxes as
  block quotes, exercises and theorems as bold labels, solutions in ``<details>``, citations as text with
  a "References" cell at the end, cross-references as the numbers or titles they point to;
* a glued number ``{glue:text}`name``` becomes the marker ``⟨name⟩``, and each Markdown cell that shows
  one is followed by a small form cell (collapsed in Colab) that displays those paragraphs again with this
  run's values (:func:`companion_lib.common.glue.show_glued`; a value computed further down is filled
  in when the run reaches it);
* a figure's caption (the code cell's ``mystnb: figure: caption:``) becomes a Markdown cell under it;
* ``{literalinclude}`` of library code becomes a small form cell that shows the installed library's
  source, so that the copy never goes stale when the library changes;
* the author's hidden checks (``remove-cell``, other than the setup cell): a check that can run at the
  end without changing anything (:func:`hidden_cell_plan`) is folded into one "Checks of this page" cell
  at the end; a hidden cell that glues numbers or defines names that later cells use, or a check that
  must run where it stands, stays in place as a collapsed form cell with a title saying what it is.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

from .myst import Chapter, Segment, glue_names, glued_blocks, python_string

__all__ = ["SETUP_MARKER", "chapter_notebooks", "chapter_extra", "colab_setup_source", "paired_notebook", "sync_notebooks",
           "ipynb_text", "hidden_cell_plan", "CHECKS_TITLE"]

SETUP_MARKER = 'if "google.colab" in sys.modules:'
CHECKS_TITLE = "## Checks of this page"
GLUE_CELL_TITLE = "#@title The text above with this run's numbers"
COMPUTES_TITLE = "#@title Hidden on the website: computes numbers the text quotes"
CHECK_TITLE = "#@title Hidden on the website: the author's check of the cells above"


def _is_myst_notebook(text: str) -> bool:
    head = text.split("\n---", 1)[0] if text.startswith("---") else ""
    return bool(re.search(r"format_name:\s*myst", head))


def chapter_notebooks(root: Path) -> list[Path]:
    """Every MyST notebook under ``<root>/chapters`` (plain pages such as ``index.md`` excluded)."""
    root = Path(root)
    return sorted(p for p in (root / "chapters").rglob("*.md")
                  if ".ipynb_checkpoints" not in p.parts and _is_myst_notebook(p.read_text(encoding="utf-8")))


def chapter_extra(root: Path, chapter: str) -> str | None:
    """The extra of ``pyproject.toml`` named after a chapter's slug (``15-event-isp`` -> ``event-isp``), if any."""
    import tomllib

    slug = chapter.split("-", 1)[1] if re.match(r"^\d\d-", chapter) else chapter
    project = tomllib.loads((Path(root) / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return slug if slug in project.get("optional-dependencies", {}) else None


def colab_setup_source(root: Path, chapter: str | None = None) -> str:
    """The source of the Colab setup cell, from ``_config.yml`` (repository) and ``pyproject.toml`` (version).

    The MyST sources all carry the same cell; a chapter's Colab copies (``chapter`` given) install the
    chapter's extra with the package when ``pyproject.toml`` declares one.
    """
    import tomllib

    import yaml

    root = Path(root)
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    url = config["repository"]["url"].rstrip("/")
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extra = chapter_extra(root, chapter) if chapter else None
    name = f"{project['name']}[{extra}]" if extra else project["name"]
    return ("# Colab setup: inside Google Colab, install this book's companion library; elsewhere, do nothing.\n"
            "import sys\n\n"
            f"{SETUP_MARKER}\n"
            f'    %pip install --quiet "{name} @ git+{url}@v{project["version"]}"')


def _fix_setup_cell(md: Path, expected: str) -> bool:
    """Replace the body of the first code cell of ``md`` by ``expected`` if it is a Colab cell that differs."""
    text = md.read_text(encoding="utf-8")
    match = re.search(r"```\{code-cell\}[^\n]*\n(?::tags:[^\n]*\n\n)?(.*?)```", text, re.S)
    if not match or "google.colab" not in match.group(1) or match.group(1).strip() == expected.strip():
        return False
    md.write_text(text[:match.start(1)] + expected + "\n" + text[match.end(1):], encoding="utf-8")
    return True


# -- the author's hidden cells -------------------------------------------------------------------------
#: calls that never change their arguments (an author's check may call them and still move to the end)
_PURE_FUNCTIONS = {"len", "abs", "max", "min", "all", "any", "sum", "float", "int", "bool", "str", "round", "sorted",
                   "isinstance", "set", "list", "tuple", "dict", "zip", "range", "enumerate", "print", "repr",
                   "map", "filter", "reversed", "type", "hasattr", "getattr", "frozenset"}
_PURE_METHODS = {"mean", "max", "min", "sum", "all", "any", "abs", "item", "std", "var", "to_numpy", "numpy",
                 "tolist", "keys", "values", "items", "get", "argmax", "argmin", "idxmax", "idxmin", "median",
                 "isna", "notna", "isfinite", "diff", "round", "copy", "astype", "prod", "cumsum", "nunique",
                 "unique", "count", "index", "startswith", "endswith", "format", "lower", "upper", "strip",
                 "split", "join", "issubset", "issuperset", "detach", "cpu", "sort_values", "quantile",
                 "allclose", "isclose", "equals", "dropna", "reshape", "flatten", "ravel", "squeeze", "sort",
                 "assert_all", "row", "rows", "verdicts", "outcomes", "shape", "eq", "ne", "lt", "le", "gt", "ge",
                 "between", "isin", "norm", "trace", "det", "eigvalsh", "nonzero", "argsort", "clip"}


_STATEFUL = re.compile(r"rng|gen|random|model|net|opt|sched|state|cache|world|claims|table", re.I)


def _code_for_ast(source: str) -> str:
    """Cell source as Python: IPython's own transformer turns magics and shell escapes into calls."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


class _Names(ast.NodeVisitor):
    """Names a cell binds at module level, loads anywhere, may change (call receivers and arguments,
    item and attribute stores) and whether it glues."""

    def __init__(self, modules: set[str] = frozenset()):
        self.binds, self.loads, self.changes, self.modules = set(), set(), set(), set(modules)
        self.glues = False
        self._depth = 0

    def visit_Import(self, node):
        for alias in node.names:
            name = (alias.asname or alias.name).split(".")[0]
            self.binds.add(name)
            self.modules.add(name)

    visit_ImportFrom = visit_Import

    def _scoped(self, node):
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    def visit_FunctionDef(self, node):
        if self._depth == 0:
            self.binds.add(node.name)
            self.modules.add(node.name)   # a function the page defines: calling it changes nothing by itself
        self._scoped(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        if self._depth == 0:
            self.binds.add(node.name)
            self.modules.add(node.name)
        self._scoped(node)

    visit_Lambda = _scoped
    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _scoped

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            self.loads.add(node.id)
        elif self._depth == 0:
            self.binds.add(node.id)

    def _root(self, node):
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    def visit_Assign(self, node):
        for target in node.targets:
            if isinstance(target, (ast.Attribute, ast.Subscript)):
                self.changes.add(self._root(target))
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        root = self._root(node.target)
        if root:
            self.changes.add(root)
        self.generic_visit(node)

    def visit_Delete(self, node):
        for target in node.targets:
            self.changes.add(self._root(target))
        self.generic_visit(node)

    def visit_Call(self, node):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in ("glue", "glue_all"):
            self.glues = True
        receiver = self._root(func.value) if isinstance(func, ast.Attribute) else None
        pure = (isinstance(func, ast.Name) and name in _PURE_FUNCTIONS) or \
               (isinstance(func, ast.Attribute) and name in _PURE_METHODS)
        if not pure:
            # a method may change its object; a function of a module or of the page is taken to change only
            # the state-carrying arguments it is handed (random generators, models, optimisers)
            library_call = (isinstance(func, ast.Attribute) and receiver in self.modules) or \
                (isinstance(func, ast.Name) and func.id in self.modules)
            if receiver is not None and not library_call:
                self.changes.add(receiver)
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                root = self._root(arg)
                if root and (not library_call or _STATEFUL.search(root)):
                    self.changes.add(root)
        self.generic_visit(node)


def _names(source: str, modules: set[str] = frozenset()) -> _Names | None:
    try:
        tree = ast.parse(_code_for_ast(source))
    except SyntaxError:
        return None
    names = _Names(modules)
    names.visit(tree)
    names.changes.discard(None)
    return names


def _is_hidden(cell) -> bool:
    return cell.cell_type == "code" and "remove-cell" in cell.get("metadata", {}).get("tags", []) \
        and SETUP_MARKER not in cell.source


def hidden_cell_plan(cells) -> dict[int, str]:
    """For each hidden author cell (index in ``cells``): ``"fold"`` (a check that can run at the end of the
    page: it glues nothing, binds nothing a later cell reads, reads nothing a later cell rebinds or may
    change, and changes nothing a later cell reads), ``"computes"`` (it glues or defines what later cells
    use: stays in place) or ``"check"`` (a check that must run where it stands)."""
    first = [(_names(c.source) if c.cell_type == "code" else None) for c in cells]
    modules = set().union(*(p.modules for p in first if p is not None))   # imported modules, page functions
    parsed = [(_names(c.source, modules) if c.cell_type == "code" else None) for c in cells]
    plan: dict[int, str] = {}
    for i, cell in enumerate(cells):
        if not _is_hidden(cell):
            continue
        mine = parsed[i]
        if mine is None:
            plan[i] = "check"
            continue
        later = [p for p in parsed[i + 1:] if p is not None]
        later_loads = set().union(*(p.loads for p in later)) if later else set()
        later_binds = set().union(*(p.binds for p in later)) if later else set()
        later_changes = set().union(*(p.changes for p in later)) if later else set()
        bound = {n for n in mine.binds if n != "_"}
        if mine.glues or bound & later_loads:
            plan[i] = "computes"
            continue
        read = mine.loads - modules - bound
        if read & (later_binds | later_changes) or (mine.changes - modules - bound) & later_loads:
            plan[i] = "check"
            continue
        plan[i] = "fold"
    return plan


# -- the Colab copy ----------------------------------------------------------------------------------------
def _cell_id(cell, seen: dict[str, int]) -> str:
    digest = hashlib.sha1((cell.cell_type + "\0" + cell.source).encode()).hexdigest()[:10]
    seen[digest] = seen.get(digest, 0) + 1
    return digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"


def glue_cell_source(markdown: str) -> str | None:
    """The form cell that shows the glued numbers of a converted Markdown text (None if it shows none)."""
    blocks = glued_blocks(markdown)
    if not blocks:
        return None
    return (f"{GLUE_CELL_TITLE}\n"
            "from companion_lib.common.glue import show_glued\n\n"
            f"show_glued({python_string(blocks)})")


def _titled(source: str, title: str) -> str:
    return f"{title}\n{source}"


def paired_notebook(md: Path, chapter: Chapter | None = None, root: Path | None = None):
    """The Colab copy of a MyST notebook: plain Markdown, the same code cells in order (hidden author cells
    folded or collapsed, see the module docstring), no outputs, ids from cell contents."""
    import jupytext
    import nbformat

    md = Path(md)
    if chapter is None:
        chapter = Chapter(md.parent, root if root is not None else md.parents[2])
    nb = chapter.notebooks.get(md.stem) or jupytext.read(md)
    page = chapter.page(md.stem, target="colab")
    plan = hidden_cell_plan(nb.cells)
    cells, folded = [], []

    def markdown(text: str):
        cells.append(nbformat.v4.new_markdown_cell(text))
        source = glue_cell_source(text)
        if source is not None:
            cells.append(nbformat.v4.new_code_cell(source, metadata={"cellView": "form"}))

    def add(segment: Segment):
        if segment.kind == "markdown":
            markdown(segment.source)
        else:
            cells.append(nbformat.v4.new_code_cell(segment.source, metadata=dict(segment.metadata)))

    setup = colab_setup_source(chapter.root, md.parent.name)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for segment in page.convert_markdown(cell.source):
                add(segment)
            continue
        if cell.cell_type != "code":
            continue
        page.numbering["bold"] = None
        metadata = {k: v for k, v in cell.metadata.items() if k != "mystnb"}
        kind = plan.get(i)
        if kind == "fold":
            folded.append(cell.source.strip("\n"))
            continue
        source = setup if SETUP_MARKER in cell.source else cell.source
        if kind is not None:
            source = _titled(source, COMPUTES_TITLE if kind == "computes" else CHECK_TITLE)
            metadata["cellView"] = "form"
        cells.append(nbformat.v4.new_code_cell(source, metadata=metadata))
        caption = page.figure(cell)
        if caption is not None:
            add(caption)
    if folded:
        cells.append(nbformat.v4.new_markdown_cell(
            f"{CHECKS_TITLE}\n\nThe author's checks of the numbers above, hidden on the website, all in one cell: "
            "run it after the rest of the notebook (\"Run all\" does). An `AssertionError` means that a result "
            "this page states does not hold in this run."))
        cells.append(nbformat.v4.new_code_cell("\n\n".join(folded), metadata={"tags": ["page-checks"]}))
    references = page.references()
    if references is not None:
        add(references)
    out = nbformat.v4.new_notebook(cells=cells, metadata=dict(nb.metadata))
    seen: dict[str, int] = {}
    for cell in out.cells:
        cell["id"] = _cell_id(cell, seen)
        if cell.cell_type == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    out.metadata.pop("jupytext", None)
    out.metadata["colab"] = {"provenance": []}
    out.nbformat, out.nbformat_minor = 4, 5
    return out


def ipynb_text(nb) -> str:
    import nbformat

    return nbformat.writes(nb) + "\n"


def sync_notebooks(root: Path, check: bool = False) -> list[Path]:
    """Bring every chapter notebook's setup cell and ``.ipynb`` copy up to date.

    Returns the files that were (or, with ``check=True``, would be) rewritten.
    """
    from .myst import Bibliography

    root = Path(root)
    expected = colab_setup_source(root)
    bibliography = Bibliography(root / "book" / "references.bib")
    stale: list[Path] = []
    chapters: dict[Path, Chapter] = {}
    for md in chapter_notebooks(root):
        import jupytext

        if check:
            nb = jupytext.read(md)
            first = next((c for c in nb.cells if c.cell_type == "code"), None)
            if first is None or first.source.strip() != expected.strip():
                stale.append(md)
        elif _fix_setup_cell(md, expected):
            stale.append(md)
            chapters.pop(md.parent, None)
        if md.parent not in chapters:
            chapters[md.parent] = Chapter(md.parent, root, bibliography)
        target = md.with_suffix(".ipynb")
        text = ipynb_text(paired_notebook(md, chapters[md.parent]))
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            stale.append(target)
            if not check:
                target.write_text(text, encoding="utf-8")
    # a .ipynb whose .md source is gone is stale too
    for ipynb in sorted((root / "chapters").rglob("*.ipynb")):
        if ".ipynb_checkpoints" not in ipynb.parts and not ipynb.with_suffix(".md").exists():
            stale.append(ipynb)
            if not check:
                ipynb.unlink()
    return stale
