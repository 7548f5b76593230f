"""``ln-glossary``: the Glossary page's tables, built from ``docs/glossary.yaml``.

The YAML file is the one source of each term's Chinese rendering: this
directive shows it (English, 中文, the renderings not to use, the meaning in the
edition's language) and ``tests/test_terms.py`` checks every Chinese catalog
against it. ``:kept-english:`` lists instead the terms the Chinese text keeps in
English (the allow-list).

The meanings come in both languages from the YAML file, so the generated nodes
are kept out of the page catalog (``translatable = False``); only the page's
own prose is translated in ``glossary.po``. In a meaning, ``$...$`` is math and
```...``` is code, as in the page's Markdown.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

GLOSSARY = Path(__file__).resolve().parents[1] / "glossary.yaml"
_INLINE = re.compile(r"\$([^$]+)\$|`([^`]+)`")


def load(path: Path = GLOSSARY) -> dict:
    """The glossary: ``{"columns": {lang: [...]}, "terms": [{"en", "zh", "meaning", ...}, ...]}``."""
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _inline(text: str) -> list[nodes.Node]:
    """Text with ``$math$`` and ```code``` as docutils nodes."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        if m.start() > pos:
            out.append(nodes.Text(text[pos:m.start()]))
        out.append(nodes.math(m.group(1), m.group(1)) if m.group(1) is not None
                   else nodes.literal(m.group(2), m.group(2)))
        pos = m.end()
    if pos < len(text):
        out.append(nodes.Text(text[pos:]))
    return out


def _cell(*parts: list[nodes.Node]) -> nodes.entry:
    para = nodes.paragraph()
    for part in parts:
        para += part
    return nodes.entry("", para)


def _row(cells: list[nodes.entry]) -> nodes.row:
    row = nodes.row()
    row.extend(cells)
    return row


def _fixed(node: nodes.Node) -> nodes.Node:
    """Generated text, already in the edition's language: keep it out of the page catalog."""
    for sub in node.findall(nodes.TextElement):
        sub["translatable"] = False
    return node


class Glossary(SphinxDirective):
    has_content = False
    option_spec = {"kept-english": directives.flag}

    def run(self):
        self.env.note_dependency(str(GLOSSARY))
        glossary = load()
        language = "zh_CN" if str(self.env.config.language).startswith("zh") else "en"
        if "kept-english" in self.options:
            kept = [t["en"] for t in glossary["terms"] if t.get("keep_english")]
            para = nodes.paragraph()
            for i, term in enumerate(kept):
                para += nodes.Text("、" if i and language == "zh_CN" else ", " if i else "")
                para += nodes.strong(term, term)
            return [_fixed(para)]

        headers = glossary["columns"][language]
        table = nodes.table(classes=["ln-glossary"])
        group = nodes.tgroup(cols=len(headers))
        table += group
        for width in (22, 18, 14, 46):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        head += _row([_cell([nodes.Text(h)]) for h in headers])
        body = nodes.tbody()
        for term in glossary["terms"]:
            banned = "、".join(term.get("banned", [])) or "—"
            body += _row([
                _cell(_inline(term["en"])),
                _cell([nodes.Text(term["zh"])]),
                _cell([nodes.Text(banned)]),
                _cell(_inline(term["meaning"][language])),
            ])
        group += head
        group += body
        return [_fixed(table)]


def setup(app):
    app.add_directive("ln-glossary", Glossary)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
