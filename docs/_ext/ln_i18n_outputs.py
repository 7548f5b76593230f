"""The gallery pages' outputs, code comments and figure labels in the edition's language.

The examples' own prose, printed strings and comments are translated by the page
catalogs and the code catalogs (``docs/locale/<lang>/code/<example>.po``, see
``ln_gallery.translate_code``). What the *package* prints (tables,
``ln_tutorial.explain``), the package code the pages show, and the labels the
package draws are English. This extension translates them where they land,
from text alone, so it works on a fresh run and on outputs recorded on another
machine (``ln_recorded``):

* **Printed outputs.** Every literal block of class ``sphx-glr-script-out`` of a
  gallery page is translated line by line through
  ``docs/locale/<lang>/code/outputs.po``. A message there is a *template*: its
  ``{name}`` fields match any text, which is translated in turn (a reason
  inside a reason), and the line must match it whole. Messages with
  ``msgctxt "cell"`` are cells of a table: a header such as ``values per
  thread`` is replaced where it stands, its right edge kept, and the columns
  below it widened when the translation is wider (width counted as a
  terminal does: two columns for a Chinese character). ``100 %`` loses its
  space. A line that no template matches is left as it is.
* **Code.** The gallery's Python blocks are translated token by token: the
  example's own strings and comments through its code catalog (where the
  edition shows the English run's code; a translated run's code is Chinese
  already), the comments and docstrings of the package code it shows through
  ``code/package.po`` and ``code/layer_norm_triton.po``
  (``ln_tutorial_book/plain.py``), the generated ``# From <file>: ...`` lines
  through ``outputs.po``. String literals of the package stay as the package
  has them. On every other page, the comments of Python and shell blocks go
  through ``outputs.po``.
* **Figures.** The gallery saves its figures with
  :func:`translated_matplotlib_scraper`: each text of a figure (title, axis
  labels, legend) is translated through ``outputs.po`` like an output line.
  A non-English edition's own run saves them translated; the English run saves
  them as they are and a translated copy beside each
  (``sphx_glr_<name>_001.zh_CN.png``), which the edition's pages show when it
  uses the English run's outputs. The machine that runs the examples needs a
  font with Chinese glyphs (Noto Sans CJK SC).

``tests/test_code_i18n.py`` checks that the real outputs, explanations,
tables and figure labels leave no English prose behind.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import unicodedata
from pathlib import Path

from docutils import nodes
from sphinx.transforms import SphinxTransform

from ln_gallery import CJK_FONTS  # the translated font list of the figures (ln_gallery sets it for the whole run too)

OUTPUT_CLASS = "sphx-glr-script-out"
_FIELD = re.compile(r"\{(\w+)(?::num)?\}")  # {name}: any English text; {name:num}: numbers
_HAN = re.compile(r"[\u3400-\u9fff]")
_NUMBERS = r"\d[\d.]*(?:, ?\d[\d.]*)*"  # a {name:num} field: a number, or a list of them
#: Code blocks whose ``#`` comments are translated through the templates (on every page).
SHELL = ("bash", "sh", "shell", "console")
_CACHE: dict = {}
#: Set at config-inited: the edition's language and the docs folder (the scraper has no app).
STATE = {"language": "en", "confdir": None}


def width(text: str) -> int:
    """Columns ``text`` takes in a terminal or a monospace font."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _read_po(path: Path) -> list[tuple[str | None, str, str]]:
    from babel.messages.pofile import read_po

    if not Path(path).is_file():
        return []
    with Path(path).open("rb") as f:
        return [(m.context, m.id, m.string) for m in read_po(f) if m.id and m.string and not m.fuzzy]


class Translator:
    """Output lines, table cells and figure texts through a catalog of templates (see the module docstring)."""

    def __init__(self, entries):
        self.templates = []
        self.cells = []
        for context, msgid, msgstr in entries:
            if context == "cell":
                self.cells.append((msgid, msgstr))
                continue
            parts = re.split(r"(\{\w+(?::num)?\})", msgid)
            # a field is English text (never Chinese: a line a translated print began stays whole)
            pattern = "".join(re.escape(p) if i % 2 == 0 else
                              f"(?P<{p[1:-5]}>{_NUMBERS})" if p.endswith(":num}") else f"(?P<{p[1:-1]}>[^\u3400-\u9fff]+?)"
                              for i, p in enumerate(parts))
            literal = sum(len(p) for p in parts[::2])
            self.templates.append((literal, re.compile(pattern + r"\Z", re.S), msgstr))
        self.templates.sort(key=lambda t: -t[0])
        self.cells.sort(key=lambda c: -len(c[0]))

    def segment(self, text: str, depth: int = 0) -> str | None:
        """The translation of ``text`` by the first template it matches whole, else None."""
        for _, pattern, msgstr in self.templates:
            m = pattern.match(text)
            if m:
                fields = {k: self._field(v, depth) for k, v in m.groupdict().items()}
                return _FIELD.sub(lambda f: fields[f.group(1)], msgstr)
        return None

    def _pieces(self, body: str) -> str:
        """A translated line's English pieces between full-width marks (a value printed after
        ``：``, a reason in ``（）``), each through the templates; no space beside ``：；（）``."""
        parts = re.split(r"([：（）；])", body)
        for i in range(0, len(parts), 2):
            piece = parts[i].strip()
            if piece and not _HAN.search(piece) and re.search(r"[A-Za-z]{2}", piece):
                translated = self.segment(piece)
                if translated is not None:
                    parts[i] = parts[i].replace(piece, translated)
        return re.sub(r" *([：；（）]) *", r"\1", "".join(parts))  # no space beside a full-width mark

    def _field(self, value: str, depth: int) -> str:
        if depth >= 8 or not re.search(r"[A-Za-z]{2}", value):
            return value
        return self.segment(value, depth + 1) or self._cell_words(value)

    def _cell_words(self, value: str) -> str:
        """A field that is a cell's word (a provider, yes/no), or a list of them: their cell translations."""
        cells = dict(self.cells)
        return ", ".join(cells.get(item, item) for item in value.split(", "))

    def line(self, line: str, pieces: bool = True) -> str:
        """One output line: a template for the whole line (indentation kept); in a line already
        in the edition's language (a translated print), its English pieces; else unchanged."""
        body = line.strip()
        if not body:
            return line
        found = self.segment(body)
        if found is None:
            if not pieces or not _HAN.search(body):
                return line
            found = self._pieces(body)
            if found == body:
                return line
        indent = len(line) - len(line.lstrip())
        if indent >= 4:  # a right-aligned name before a colon (rows of such lines): keep the colons aligned
            before, after = re.split(r"[:：]", body, 1)[0], re.split(r"[:：]", found, 1)[0]
            indent = max(0, indent + width(before) - width(after))
        return " " * indent + _percent(found)

    def text(self, text: str) -> str:
        """A figure's text, line by line; lines that ``textwrap`` broke are translated together and wrapped
        again at the same width. A first line that is a text of its own, followed by lines that are one
        (a title above its ``textwrap``-ed subtitle), stays a line of its own: a field would swallow it."""
        lines, out, i = text.split("\n"), [], 0
        while i < len(lines):
            for j in range(len(lines), i + 1, -1):
                found = self.segment(_joined(lines[i:j]))
                title_apart = self.segment(lines[i].strip()) and self.segment(_joined(lines[i + 1 : j]))
                if found is not None and not title_apart:
                    out += wrap(_percent(found), max(width(line) for line in lines[i:j]))
                    i = j
                    break
            else:
                out.append(self.line(lines[i]))
                i += 1
        return "\n".join(out)

    def block(self, text: str) -> str:
        """A whole printed output: lines through templates, tables cell by cell with their columns aligned."""
        out, shifts = [], []
        for line in text.split("\n"):
            if not line.strip():
                shifts = []
                out.append(line)
                continue
            translated = self.line(line, pieces=not _table_like(line))
            if translated != line or not _table_like(line):
                out.append(translated)
                continue
            header = not re.search(r"\d", line)  # a table's rows hold numbers, its header none
            if header:
                line, shifts = self._cells(line)  # a header wider in translation widens the rows below
            else:
                line, _ = self._cells(_shift(line, shifts))
            out.append(_table_percent(line))
        return "\n".join(out)

    def _cells(self, line: str) -> tuple[str, list[tuple[int, int]]]:
        """``line`` with its known cells translated in place, right edges kept; the (edge, extra) overflows."""
        edits = []
        taken = [False] * len(line)
        for phrase, translation in self.cells:
            for m in re.finditer(r"(?:(?<=\s)|^)" + re.escape(phrase) + r"(?=\s|$)", line):
                if any(taken[m.start():m.end()]):
                    continue
                for i in range(m.start(), m.end()):
                    taken[i] = True
                edits.append((m.start(), m.end(), translation))
        overflows = []
        for start, end, translation in sorted(edits, reverse=True):
            pad = len(line[:start]) - len(line[:start].rstrip(" "))
            room = pad if pad == start else pad - 1  # keep one space between cells
            extra = width(translation) - (end - start)
            if extra <= room:
                line = line[: start - max(extra, 0)] + " " * max(-extra, 0) + translation + line[end:]
            else:
                line = line[: start - room] + translation + line[end:]
                overflows.append((end, extra - room))
        return line, overflows


def wrap(text: str, columns: int) -> list[str]:
    """``text`` in lines of at most ``columns`` display columns, broken after a space or a full-width
    mark, or between Chinese characters."""
    lines, line, last_break = [], "", -1
    for ch in text:
        line += ch
        if ch == " " or ch in "，；、：）" or _HAN.match(ch):
            last_break = len(line)
        if width(line) > columns and last_break > 0:
            lines.append(line[:last_break].rstrip())
            line, last_break = line[last_break:].lstrip(), -1
    return lines + [line] if line else lines


def _table_like(line: str) -> bool:
    return bool(re.search(r"\S {2,}\S", line) or re.match(r" {2,}\S", line))


def _shift(line: str, shifts: list[tuple[int, int]]) -> str:
    """Widen the columns ending at the English header's edges by the overflow of their translated header."""
    for edge, extra in sorted(shifts, reverse=True):
        if edge > len(line.rstrip()):
            continue  # a header cell past the rows' last column (a note after the table's header)
        end = edge
        start = end
        while start > 0 and line[start - 1] != " ":
            start -= 1
        line = line[:start] + " " * extra + line[start:]
    return line


def _table_percent(line: str) -> str:
    """``79 %`` in a right-aligned cell: ``79%``, the space moved to the front."""
    return re.sub(r"(?<= )(\S*\d) %(?=\s|$)", r" \1%", line)


def _percent(text: str) -> str:
    """``100 %`` in a sentence: ``100%``."""
    return re.sub(r"(\d) %", r"\1%", text)


def _joined(lines: list[str]) -> str:
    """Lines that ``textwrap`` broke, joined again (a break after a hyphen joins without a space)."""
    return "".join(line.strip() + ("" if line.endswith("-") else " ") for line in lines).strip()


def translator(confdir: Path | str, language: str) -> Translator:
    """The templates of ``locale/<language>/code/outputs.po`` (cached)."""
    key = (str(confdir), language, "outputs")
    if key not in _CACHE:
        _CACHE[key] = Translator(_read_po(Path(confdir) / "locale" / language / "code" / "outputs.po"))
    return _CACHE[key]


def code_catalog(confdir: Path | str, language: str, example: str) -> tuple[dict[str, str], dict[str, str]]:
    """``(own, package)``: the example's code catalog (its strings and comments) and the comments and
    docstrings of the package code it shows (see the module docstring)."""
    key = (str(confdir), language, example)
    if key not in _CACHE:
        base = Path(confdir) / "locale" / language / "code"
        read = lambda name: {i: s for c, i, s in _read_po(base / f"{name}.po") if not c}  # noqa: E731
        _CACHE[key] = (read(example), {**read("layer_norm_triton"), **read("package")})
    return _CACHE[key]


def _docstring_starts(code: str) -> set[tuple[int, int]]:
    """(line, column) of every docstring of a function or class in ``code`` (nothing if it does not parse)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add((first.lineno, first.col_offset))
    return found


def comment_tokens(code: str, strings: bool = False):
    """The COMMENT tokens and the docstring STRING tokens of ``code`` (none if it does not tokenize);
    with ``strings``, every STRING token (an f-string whole)."""
    import ln_gallery

    docstrings = _docstring_starts(code)
    try:
        tokens = list(ln_gallery._whole_string_tokens(code))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    return [t for t in tokens if t.type == tokenize.COMMENT
            or (t.type == tokenize.STRING and (strings or t.start in docstrings))]


def translate_comments(code: str, catalog: dict[str, str], outputs: Translator,
                       own: dict[str, str] | None = None) -> str:
    """``code`` with its comments and docstrings translated (``# From ...`` lines through the templates);
    with ``own`` (the example's code catalog), its strings and comments too."""
    lines = code.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    edits, docstrings = [], _docstring_starts(code)
    for tok in comment_tokens(code, strings=bool(own)):
        new = (own or {}).get(tok.string)
        if new is None and (tok.type == tokenize.COMMENT or tok.start in docstrings):
            new = catalog.get(tok.string)
        if new is None and tok.type == tokenize.COMMENT:
            body = outputs.segment(tok.string[1:].strip())
            new = f"# {body}" if body else None
        if new is not None and new != tok.string:
            edits.append((starts[tok.start[0] - 1] + tok.start[1], starts[tok.end[0] - 1] + tok.end[1], new))
    for begin, end, new in sorted(edits, reverse=True):
        code = code[:begin] + new + code[end:]
    return code


def translate_shell_comments(code: str, outputs: Translator) -> str:
    """A shell block with each ``# comment`` translated through the templates (its ``#`` stays in place)."""
    def comment(m: re.Match) -> str:
        translated = outputs.segment(m.group(2).strip())
        return m.group(1) + translated if translated else m.group(0)

    return re.sub(r"((?:^|(?<=\s))#[ \t]*)(.+)$", comment, code, flags=re.M)


def translate_figure(fig, outputs: Translator) -> int:
    """Translate the texts of a matplotlib figure in place; the number translated."""
    from matplotlib.text import Text
    from matplotlib.ticker import FixedFormatter, FuncFormatter

    count = 0
    for ax in fig.axes:  # tick labels given as text (set_yticks(..., labels)) are set again at each draw
        for axis in (ax.xaxis, ax.yaxis):
            formatter = axis.get_major_formatter()
            if isinstance(formatter, (FixedFormatter, FuncFormatter)):
                locs = list(axis.get_majorticklocs())
                labels = [str(formatter(loc, i)) for i, loc in enumerate(locs)]
                translated = [outputs.text(label) if re.search(r"[A-Za-z]{2}", label) else label for label in labels]
                if translated != labels:
                    axis.set_ticks(locs, translated)
                    axis.set_tick_params(labelfontfamily=CJK_FONTS)
                    count += 1
    for artist in fig.findobj(Text):
        text = artist.get_text()
        if not text or "$" in text or not re.search(r"[A-Za-z]{2}", text):
            continue
        new = outputs.text(text)
        if new != text:
            artist.set_text(new)
            artist.set_fontfamily(CJK_FONTS)
            count += 1
    return count


def translated_path(image: Path | str, language: str) -> Path:
    """Where the ``language`` copy of a gallery figure goes: ``sphx_glr_x_001.png`` -> ``sphx_glr_x_001.zh_CN.png``."""
    image = Path(image)
    return image.with_name(f"{image.stem}.{language}{image.suffix}")


#: A translated figure is saved with its canvas fitted to its texts: the layout was made for the English
#: ones, and a longer translation (a legend beside the axes) would be cut off at the edge.
TRANSLATED_SAVE = {"bbox_inches": "tight", "pad_inches": 0.1}


def translated_matplotlib_scraper(block, block_vars, gallery_conf, **kwargs):
    """sphinx-gallery's matplotlib scraper, with the figures in the edition's language.

    A non-English edition's run translates every open figure's texts before they are
    saved. The English run saves the figures as they are and then, for every language
    with an ``outputs.po``, a translated copy beside each (:func:`translated_path`), so
    that an edition that shows the English run's outputs has its figures too.
    """
    from sphinx_gallery.scrapers import matplotlib_scraper

    if not STATE["confdir"]:
        return matplotlib_scraper(block, block_vars, gallery_conf, **kwargs)
    import matplotlib.pyplot as plt

    figures = [plt.figure(num) for num in plt.get_fignums()]
    if STATE["language"] != "en":
        outputs = translator(STATE["confdir"], STATE["language"])
        for fig in figures:
            translate_figure(fig, outputs)
        return matplotlib_scraper(block, block_vars, gallery_conf, **{**TRANSLATED_SAVE, **kwargs})
    paths = block_vars["image_path_iterator"]
    first = len(paths.paths)
    rst = matplotlib_scraper(block, block_vars, gallery_conf, **kwargs)
    for language in sorted(p.parent.parent.name for p in (Path(STATE["confdir"]) / "locale").glob("*/code/outputs.po")):
        outputs = translator(STATE["confdir"], language)
        for fig, image in zip(figures, paths.paths[first:]):
            translate_figure(fig, outputs)
            fig.savefig(translated_path(image, language), facecolor=fig.get_facecolor(), edgecolor=fig.get_edgecolor(),
                        **TRANSLATED_SAVE)  # fmt: skip
    return rst


class TranslatedOutputs(SphinxTransform):
    """Translate a gallery page's printed outputs and the comments of its code cells."""

    default_priority = 820  # after the i18n transforms

    def apply(self, **kwargs) -> None:
        language = str(self.config.language)
        if language == "en":
            return
        galleries = self.config.sphinx_gallery_conf.get("gallery_dirs", []) \
            if "sphinx_gallery_conf" in self.config else []  # fmt: skip
        galleries = [galleries] if isinstance(galleries, str) else list(galleries)
        gallery = any(self.env.docname.startswith(g.rstrip("/") + "/") for g in galleries)
        confdir = Path(self.env.srcdir)  # conf.py's folder: the locale folder is beside it
        outputs = translator(confdir, language)
        own, catalog = code_catalog(confdir, language, self.env.docname.rsplit("/", 1)[-1]) if gallery else ({}, {})
        if gallery:
            self._figures(confdir, language)
        for node in list(self.document.findall(nodes.literal_block)):
            text = node.astext()
            kind = str(node.get("language", "")).lower()
            if gallery and OUTPUT_CLASS in node.get("classes", []):
                new = outputs.block(text)
            elif kind in ("python", "python3", "py"):
                new = translate_comments(text, catalog, outputs, own)
            elif kind in SHELL:
                new = translate_shell_comments(text, outputs)
            else:
                continue
            if new != text:
                node.children = [nodes.Text(new)]
                node.rawsource = new  # equal to the text, or Sphinx no longer highlights the block


    def _figures(self, confdir: Path, language: str) -> None:
        """Show the translated copy of each figure where the run saved one (the English run's)."""
        for node in self.document.findall(lambda n: n.__class__.__name__ == "imgsgnode"):
            uri = node.get("uri", "")
            if uri and (confdir / translated_path(uri.lstrip("/"), language)).is_file():
                node["uri"] = str(translated_path(uri, language).as_posix())
                if node.get("srcset"):
                    node["srcset"] = re.sub(r"(\S+?)(\.png)", lambda m: m.group(1) + f".{language}" + m.group(2)
                                            if (confdir / (m.group(1) + m.group(2)).lstrip("/")).is_file()
                                            and (confdir / (m.group(1) + f".{language}.png").lstrip("/")).is_file()
                                            else m.group(0), node["srcset"])


def _configure(app, config) -> None:
    """``config-inited``: remember the edition; a non-English one saves figures through the translating scraper."""
    STATE["language"] = str(config.language)
    STATE["confdir"] = str(app.confdir)
    if "sphinx_gallery_conf" in config:
        conf = config.sphinx_gallery_conf
        conf["image_scrapers"] = tuple("ln_i18n_outputs.translated_matplotlib_scraper" if s == "matplotlib" else s
                                       for s in conf.get("image_scrapers", ("matplotlib",)))


def setup(app):
    app.connect("config-inited", _configure, priority=6)
    app.add_transform(TranslatedOutputs)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def shown_package_messages(examples: Path | str) -> list[str]:
    """The comments and docstrings of the package code the examples show (their markers), in order.

    The messages of ``code/package.po``; ``ln_tutorial_book/plain.py``'s are in
    ``code/layer_norm_triton.po`` already, and ``# fmt: skip`` is no prose.
    """
    import ln_gallery

    found: list[str] = []
    for script in sorted(Path(examples).glob("[0-9][0-9]_*.py")):
        text = script.read_text(encoding="utf-8")
        shown = [ln_gallery.object_excerpt(m["target"], m["start"], m["end"])[0] for m in ln_gallery.EXCERPT.finditer(text)]
        shown += [ln_gallery.object_source(m["target"])[0] for m in ln_gallery.MARKER.finditer(text)
                  if not m["target"].startswith("ln_tutorial_book.plain.")]
        for code in shown:
            for tok in comment_tokens(code):
                if tok.string not in found and not re.fullmatch(r"#\s*fmt:\s*\w+", tok.string):
                    found.append(tok.string)
    return found
