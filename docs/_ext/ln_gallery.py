"""Pull the package's own source into the gallery scripts at build time.

Why: the tutorial pages show the kernels and launchers of ``ln_tutorial``. A
pasted copy would drift from the tested code, and a ``literalinclude`` in a
text cell would survive into the downloaded notebook as raw reST. So the
scripts in ``examples/`` carry marker lines in their code cells::

    # ln_tutorial:source ln_tutorial.kernels.layer_norm_fwd_kernel

and :func:`expand_examples` writes a copy of ``examples/`` into a generated
(git-ignored) directory with each marker replaced by the object's current
source, found with :mod:`ast` in the module's file (decorators included). The
generated scripts are what sphinx-gallery renders, executes and offers for
download, so the page, the ``.py`` and the ``.ipynb`` all show the real code
as an ordinary code cell.

Executing such a cell defines a copy of the object in the script's namespace,
identical to the package's. The rest of a script never uses those names: it
calls the package (``ln_tutorial.layer_norm``, ``launch.layer_norm_forward``),
so the raw ``examples/*.py``, where a marker is only a comment, run the same.
A shown cell needs at run time only what its definition needs at ``def``
time: decorators and default values (``triton``, ``tl``, ``torch``), which the
scripts import in their first code cell. They also start with
``from __future__ import annotations``, so type annotations are never evaluated.

Only a marker alone on its line is expanded; it must sit in a code cell (not
in a ``# %%`` text block). The names it may point to are top-level functions,
classes and assignments of a module in the ``ln_tutorial`` package; the comment
lines directly above the object come with it.

A function can also be shown in part, where the lines that teach the idea are
a few of many::

    # ln_tutorial:source ln_tutorial.variants.lock.layer_norm_bwd_lock_kernel from "group = row" to "atomic_xchg(lock, 0)"

shows its decorators, its ``def`` line with the parameters on as few lines as
fit, and the lines of its body from the one line that contains the ``from``
text to the first line from there on that contains the ``to`` text (without
``to``, to the end of the function); ``...`` stands for the lines left out.
The texts are matched in the current source, so an excerpt that no longer
matches fails the build instead of showing other lines. The excerpt must be
valid Python (it starts at the body's indentation), and executing it defines
a function that the script never calls.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import shutil
import tokenize
from pathlib import Path

#: A marker: the whole line, optionally indented, naming ``module.object``.
MARKER = re.compile(r"^(?P<indent>[ \t]*)# ln_tutorial:source (?P<target>[\w.]+)[ \t]*$", re.M)
#: An excerpt marker: ``module.function from "text" to "text"`` (``to`` is optional).
EXCERPT = re.compile(
    r'^(?P<indent>[ \t]*)# ln_tutorial:source (?P<target>[\w.]+) from "(?P<start>[^"]+)"(?: to "(?P<end>[^"]+)")?[ \t]*$',
    re.M,
)

_REPO = Path(__file__).resolve().parents[2]


def module_file(module: str) -> Path:
    """Path of ``module``'s source file, without importing the package (no torch needed)."""
    top, _, rest = module.partition(".")
    candidate = _REPO / top
    if not candidate.is_dir():
        spec = importlib.util.find_spec(top)
        if spec is None or not spec.submodule_search_locations:
            raise LookupError(f"cannot find package {top!r}")
        candidate = Path(list(spec.submodule_search_locations)[0])
    path = candidate.joinpath(*rest.split(".")) if rest else candidate / "__init__"
    if path.is_dir():
        return path / "__init__.py"
    return path.with_suffix(".py")


def object_source(target: str) -> tuple[str, Path, int]:
    """``(source, file, first line)`` of the top-level object ``module.name``."""
    source, path, first, _ = _object(target)
    return source, path, first


def _object(target: str):
    """``(source, file, first line, ast node)`` of the top-level object ``module.name``."""
    module, _, name = target.rpartition(".")
    path = module_file(module)
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    for node in ast.parse(text, filename=str(path)).body:
        names = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        if name in names:
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            # Comment lines directly above belong to the object (they explain a table, say).
            while first > 1 and lines[first - 2].lstrip().startswith("#"):
                first -= 1
            return "\n".join(lines[first - 1 : node.end_lineno]), path, first, node
    raise LookupError(f"{target}: no top-level def, class or assignment named {name!r} in {path}")


def object_excerpt(target: str, start: str, end: str | None = None, width: int = 100) -> tuple[str, Path]:
    """``(excerpt, file)``: the function ``module.name`` shown in part (see the module docstring)."""
    _, path, _, node = _object(target)
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise LookupError(f"{target}: an excerpt needs a function")
    lines = path.read_text(encoding="utf-8").splitlines()
    body_first = node.body[0].lineno  # the docstring, or the first statement
    body = range(body_first, node.end_lineno + 1)  # 1-based line numbers
    hits = [n for n in body if start in lines[n - 1]]
    if len(hits) != 1:
        raise LookupError(f"{target}: {len(hits)} lines contain {start!r}; an excerpt starts at exactly one")
    begin = hits[0]
    stop = node.end_lineno
    if end is not None:
        after = [n for n in range(begin, node.end_lineno + 1) if end in lines[n - 1]]
        if not after:
            raise LookupError(f"{target}: no line from {start!r} on contains {end!r}")
        stop = after[0]
    decorators = [lines[d.lineno - 1].strip() for d in node.decorator_list]
    args = node.args
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg:  # one piece, as ast writes it
        params = [ast.unparse(args)]
    else:
        params = [ast.unparse(a) for a in args.args]
        for i, default in enumerate(args.defaults):
            params[len(params) - len(args.defaults) + i] += f"={ast.unparse(default)}"
    header, line = [], f"def {node.name}("
    for i, param in enumerate(params):
        piece = param + (", " if i < len(params) - 1 else "):")
        if len(line) + len(piece.rstrip()) > width and line.strip() != f"def {node.name}(":
            header.append(line.rstrip())
            line = "        "
        line += piece
    header.append(line if params else f"def {node.name}():")
    shown = lines[begin - 1 : stop]
    indent = re.match(r"[ \t]*", lines[body_first - 1]).group()
    out = decorators + header
    if begin > body_first:
        out.append(indent + "...")
    out += shown
    if stop < node.end_lineno:
        out.append(indent + "...")
    excerpt = "\n".join(out)
    try:
        compile(excerpt, f"{target} (excerpt)", "exec")
    except SyntaxError as error:
        raise LookupError(f"{target}: the excerpt from {start!r} is not valid Python ({error.msg}): "
                          "start and end it at the body's indentation") from error
    return excerpt, path


def expand_text(text: str) -> str:
    """``text`` with every marker line replaced by the source it names."""

    def replace(match: re.Match) -> str:
        target, indent = match["target"], match["indent"]
        source, path, first = object_source(target)
        rel = path.relative_to(path.parents[1]).as_posix()
        header = f"# From {rel}: the package's own source, inserted when this file was generated.\n"
        body = header + source
        return "\n".join(indent + line if line else line for line in body.splitlines())

    def replace_excerpt(match: re.Match) -> str:
        target, indent = match["target"], match["indent"]
        excerpt, path = object_excerpt(target, match["start"], match["end"])
        rel = path.relative_to(path.parents[1]).as_posix()
        header = (f"# From {rel}: part of the package's own {target.rpartition('.')[2]}, inserted when this "
                  "file was generated.\n")
        body = header + excerpt
        return "\n".join(indent + line if line else line for line in body.splitlines())

    # Two blank lines between the objects of consecutive markers, as between definitions.
    text = re.sub(r"^([ \t]*# ln_tutorial:source [^\n]*)\n(?=[ \t]*# ln_tutorial:source )", r"\1\n\n\n", text, flags=re.M)
    return EXCERPT.sub(replace_excerpt, MARKER.sub(replace, text))


def expand_examples(src: Path, dst: Path, code_catalogs: Path | None = None) -> list[Path]:
    """Mirror ``src`` into ``dst``, expanding markers in ``*.py``; return the written files.

    With ``code_catalogs`` (a folder of ``<script name>.po``), each script's own
    code is translated first (:func:`translate_code`), then its markers expanded:
    the package's source comes in unchanged.

    Files whose content did not change are left untouched (sphinx-gallery
    keys its cache on content, and unchanged mtimes keep rebuilds quiet).
    Files in ``dst`` that no longer exist in ``src`` are removed.
    """
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    wanted = {}
    for path in sorted(src.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(src)
        if path.suffix == ".py":
            text = path.read_text(encoding="utf-8")
            if code_catalogs is not None:
                text = translate_code(text, load_code_catalog(Path(code_catalogs) / f"{path.stem}.po"))
            wanted[rel] = expand_text(text).encode("utf-8")
        else:
            wanted[rel] = path.read_bytes()
    written = []
    for rel, data in wanted.items():
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if not out.exists() or out.read_bytes() != data:
            out.write_bytes(data)
        written.append(out)
    for path in sorted(dst.rglob("*"), reverse=True):
        rel = path.relative_to(dst)
        if path.is_file() and rel not in wanted:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            shutil.rmtree(path)
    return written


# -- Code in the reader's language ------------------------------------------------
# The Chinese edition runs the examples again, from copies whose printed strings,
# figure labels and code comments are translated, so that its outputs, figures and
# downloads are Chinese. The translations are token for token, in one catalog per
# script: docs/locale/<lang>/code/<script name>.po, msgid the token as written in
# the script (a string literal with its quotes, or a comment), msgstr its
# replacement. The prose of the text cells is translated by the page catalogs.


def _whole_string_tokens(source: str):
    """tokenize's tokens, each f-string one STRING token as before Python 3.12 (which tokenizes
    an f-string in pieces: FSTRING_START, its parts and fields, FSTRING_END)."""
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    depth, first = 0, None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == getattr(tokenize, "FSTRING_START", None):
            depth, first = depth + 1, first if depth else tok
        elif depth and tok.type == tokenize.FSTRING_END:
            depth -= 1
            if not depth:
                text = source[starts[first.start[0] - 1] + first.start[1]:starts[tok.end[0] - 1] + tok.end[1]]
                yield tokenize.TokenInfo(tokenize.STRING, text, first.start, tok.end, first.line)
        elif not depth:
            yield tok


def _code_tokens(source: str, gallery: bool = True):
    """The STRING and COMMENT tokens of a script's code.

    In a gallery script (``gallery``), the module docstring and the comments that
    start a line are its text cells, markers and settings: they are left out.
    """
    lines = source.splitlines()
    first = True
    for tok in _whole_string_tokens(source):
        if tok.type in (tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING):
            continue
        docstring, first = first and tok.type == tokenize.STRING, False
        if not gallery:
            if tok.type in (tokenize.COMMENT, tokenize.STRING):
                yield tok
        elif tok.type == tokenize.COMMENT:
            if not (lines[tok.start[0] - 1].lstrip() == tok.string and tok.start[1] == 0):
                yield tok
        elif tok.type == tokenize.STRING and not docstring:
            yield tok


def code_messages(source: str, gallery: bool = True) -> list[str]:
    """Tokens that read as English to a reader: comments, and string literals with a space and a word."""
    found = []
    for tok in _code_tokens(source, gallery):
        body = re.sub(r"\{[^{}]*\}", "", tok.string)
        if tok.type == tokenize.COMMENT or (" " in body.strip(" '\"") and re.search(r"[A-Za-z]{3,}", body)):
            if tok.string not in found:
                found.append(tok.string)
    return found


def load_code_catalog(po_path: Path) -> dict[str, str]:
    """msgid -> msgstr of a code catalog (translated, not fuzzy); empty when there is none."""
    if not Path(po_path).exists():
        return {}
    from babel.messages.pofile import read_po

    with Path(po_path).open("rb") as f:
        return {m.id: m.string for m in read_po(f) if m.id and m.string and not m.fuzzy}


def translate_code(source: str, catalog: dict[str, str], gallery: bool = True) -> str:
    """``source`` with every STRING or COMMENT token found in ``catalog`` replaced by its translation."""
    if not catalog:
        return source
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    edits = [(starts[t.start[0] - 1] + t.start[1], starts[t.end[0] - 1] + t.end[1], catalog[t.string])
             for t in _code_tokens(source, gallery) if t.string in catalog]
    for begin, end, new in sorted(edits, reverse=True):
        source = source[:begin] + new + source[end:]
    return source


#: Fonts matplotlib tries in turn for each character in the Chinese edition's figures
#: (Debian's fonts-noto-cjk provides the second).
CJK_FONTS = ["DejaVu Sans", "Noto Sans CJK SC"]


def _cjk_fonts(gallery_conf, fname, when=None) -> None:
    """A sphinx-gallery reset: after matplotlib's own reset, fonts with Chinese glyphs."""
    import matplotlib

    matplotlib.rcParams["font.family"] = CJK_FONTS
    matplotlib.rcParams["axes.unicode_minus"] = False  # the CJK font has no U+2212


def _cjk_font_found() -> bool:
    """Whether matplotlib finds the CJK font. One installed after matplotlib cached its list of the
    system's fonts is missing from that list: it is added from disk (``findSystemFonts`` reads no cache)."""
    from matplotlib import font_manager

    def found():
        try:
            return bool(font_manager.findfont(CJK_FONTS[-1], fallback_to_default=False))
        except ValueError:
            return False

    if found():
        return True
    for path in font_manager.findSystemFonts():
        if Path(path).name.startswith("NotoSansCJK"):  # the files of fonts-noto-cjk's sans-serif faces
            font_manager.fontManager.addfont(path)
    return found()


def translated_examples(app, config) -> None:
    """``config-inited``: a non-English edition with code catalogs runs translated copies of the examples."""
    language = str(config.language)
    catalogs = Path(app.confdir) / "locale" / language / "code"
    if language == "en" or not catalogs.is_dir():
        return
    from sphinx.util import logging

    if not _cjk_font_found():
        logging.getLogger(__name__).warning(
            "[ln_gallery] matplotlib finds no %r font: the %s figures would miss their glyphs "
            "(Debian: apt-get install fonts-noto-cjk)", CJK_FONTS[-1], language)
    conf = config.sphinx_gallery_conf
    out = Path(app.confdir) / "_generated" / f"examples_{language}"
    expand_examples(_REPO / "examples", out, catalogs)
    conf["examples_dirs"] = str(out.relative_to(app.confdir))
    conf["reset_modules"] = tuple(conf.get("reset_modules", ("matplotlib", "seaborn"))) + ("ln_gallery._cjk_fonts",)


# -- Reading budget of the core path ---------------------------------------------
#: The core pages (the tutorial a reader finishes) and their budget on the built
#: English page: prose words (code blocks excluded) and lines of shown code.
CORE_PAGES = ("tutorials/01_forward", "tutorials/02_backward", "tutorials/03_benchmark")
BUDGET_WORDS, BUDGET_CODE_LINES = 1800, 300


def reading_budget(page_html: str) -> tuple[int, int]:
    """``(prose words, lines of shown code)`` of a built page.

    Words are Latin words of two letters or more in the article's text outside
    ``<pre>``, ``<code>``, scripts and styles; code lines are the line breaks
    inside ``<pre>`` blocks (code cells and their printed output).
    """
    import html

    match = re.search(r'<div itemprop="articleBody">(.*?)<footer', page_html, re.S)
    body = match.group(1) if match else page_html
    code_lines = sum(block.count("\n") for block in re.findall(r"<pre>(.*?)</pre>", body, re.S))
    text = re.sub(r"<pre>.*?</pre>", " ", body, flags=re.S)
    text = re.sub(r"<(script|style|code)[^>]*>.*?</\1>", " ", text, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    return len(re.findall(r"[A-Za-z]{2,}", text)), code_lines


def over_budget(html_dir: Path) -> list[str]:
    """The core pages of a built English edition that exceed their budget, with their counts."""
    found = []
    for page in CORE_PAGES:
        words, code = reading_budget((Path(html_dir) / f"{page}.html").read_text(encoding="utf-8"))
        if words > BUDGET_WORDS or code > BUDGET_CODE_LINES:
            found.append(f"{page}: {words} words (budget {BUDGET_WORDS}), "
                         f"{code} lines of code (budget {BUDGET_CODE_LINES})")
    return found


def check_reading_budget(app, exception) -> None:
    """``build-finished``: a warning (an error under ``-W``) when a core page is over budget."""
    if exception is not None or app.builder.format != "html" or str(app.config.language) != "en":
        return
    from sphinx.util import logging

    for problem in over_budget(Path(app.outdir)):
        logging.getLogger(__name__).warning("[ln_gallery] over the reading budget: %s", problem)


def setup(app):
    app.connect("config-inited", translated_examples, priority=5)  # before sphinx-gallery reads its conf
    app.connect("build-finished", check_reading_budget)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
