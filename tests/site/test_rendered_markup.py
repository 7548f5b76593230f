"""No raw reST or Markdown markup visible on the built site, in either edition.

A translation can break inline markup that the English renders fine: in reST a
full-width "（" right after ````literal```` (or a Chinese character right
before it) leaves the back-quotes on the page; a role such as ``:math:`x```
too, and ``**`` that does not close in Markdown. This reads every page of
``docs/_build/html/<edition>/`` as HTML, drops what is code or math
(``<code>``, ``<pre>``, ``<script>``, ``<style>``, elements of class ``math``
or ``highlight``) and searches the remaining text for such markup.

The site tests (marked ``site``) need the built site (``tox -e docs``): they
skip without it, except under ``CI=true``, where they fail (``.ci/site`` builds
the site, then runs ``tox -e site``). The checks on planted pages run
everywhere.
"""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("LN_TUTORIAL_SITE_DIR", ROOT / "docs" / "_build" / "html"))
IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
EDITIONS = ["en", "zh_CN"]

SKIPPED_TAGS = {"script", "style", "code", "pre", "kbd", "samp", "textarea", "head", "noscript"}
# math, highlighted code, and API signatures (``*args, **meta``: <dt class="sig ...">, <span class="pre">)
SKIPPED_CLASSES = {"math", "highlight", "notranslate", "sig", "pre"}
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
ROLES = r"(?:math|func|class|meth|mod|doc|ref|attr|data|eq|exc|obj|term|numref|download|py:\w+)"
RAW = {
    "double back-quotes (a reST literal left raw)": re.compile(r"``"),
    "a reST role left raw": re.compile(rf":{ROLES}:`"),
    "a MyST role left raw": re.compile(rf"\{{{ROLES}\}}`"),
    "a back-quoted span left raw": re.compile(r"(?<![A-Za-z0-9_`])`[^`\s][^`]{0,80}`(?![`A-Za-z0-9_])"),
    "** (strong emphasis left raw)": re.compile(r"(?<![A-Za-z0-9_])\*\*|\*\*(?![A-Za-z0-9_])"),  # not 2**31
    "*...* (emphasis left raw)": re.compile(r"(?<![A-Za-z0-9_*\\])\*[^\s*\d][^*]{0,80}?[^\s*]\*(?![A-Za-z0-9_*])"),
}


class _VisibleText(HTMLParser):
    """The text of <body> outside code, math and scripts; and the text of each inline <code>."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []  # per open element: tag, is its content skipped?
        self.chunks: list[str] = []
        self.inline_code: list[str] = []  # one string per <code> outside <pre>
        self._code_depth = 0

    def handle_starttag(self, tag, attrs):
        if tag in VOID_TAGS:
            return
        classes = set((dict(attrs).get("class") or "").split())
        skipped = (bool(self.stack) and self.stack[-1][1]) or tag in SKIPPED_TAGS or bool(classes & SKIPPED_CLASSES)
        if tag == "code" and not any(t == "pre" for t, _ in self.stack):
            if not self._code_depth:
                self.inline_code.append("")
            self._code_depth += 1
        self.stack.append((tag, skipped))

    def handle_endtag(self, tag):
        if tag in VOID_TAGS or not self.stack:
            return
        if self.stack.pop()[0] == "code" and self._code_depth:
            self._code_depth -= 1

    def handle_data(self, data):
        if self._code_depth:
            self.inline_code[-1] += data
        if not (self.stack and self.stack[-1][1]) and data.strip():
            self.chunks.append(data)


def raw_markup(html: str) -> list[str]:
    """'what: ...text around it...' for each piece of markup visible in the page's text."""
    parser = _VisibleText()
    parser.feed(html)
    found = []
    for text in parser.chunks:
        for what, pattern in RAW.items():
            for m in pattern.finditer(text):
                found.append(f"{what}: {text[max(0, m.start() - 50):m.end() + 50].strip()!r}")
    # Two literals merged into one (``a``（``b``: the first end-string was not recognized):
    # the back-quotes end up inside the <code> the reader sees.
    found += [f"double back-quotes inside inline code (two literals merged): {code[:120]!r}"
              for code in parser.inline_code if "``" in code]
    return found


def _pages(edition: str) -> list[Path]:
    base = SITE / edition
    if not (base / "index.html").exists():
        reason = f"the {edition} site is not built ({base}): run `tox -e docs` (python docs/build.py)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return sorted(p for p in base.rglob("*.html") if not {"_static", "_sources"} & set(p.relative_to(base).parts))


@pytest.mark.site
@pytest.mark.parametrize("edition", EDITIONS)
def test_no_raw_markup_on_the_built_site(edition):
    problems = []
    pages = _pages(edition)
    for page in pages:
        for hit in raw_markup(page.read_text(encoding="utf-8")):
            problems.append(f"{edition}/{page.relative_to(SITE / edition).as_posix()}: {hit}")
    assert len(pages) > 5, f"only {len(pages)} pages in {SITE / edition}"
    assert not problems, (f"raw markup visible on {len(problems)} places (in a zh_CN page, fix the msgstr in "
                          "docs/locale/zh_CN/LC_MESSAGES/: a space between ``literal`` or :role:`x` and a "
                          "full-width character):\n" + "\n".join(problems))


# The check itself, on planted pages: it must see what a reader would see.
PAGE = '<html><head><title>t</title></head><body><div class="document">{}</div></body></html>'


@pytest.mark.parametrize(
    "body",
    [
        "<p>程序 2r + k``（``k 是序号</p>",
        "<p>程序 ``2r + k``（<code>k</code> 是它的序号）</p>",
        '<p>程序 <code class="docutils literal notranslate"><span class="pre">2r</span> <span class="pre">+</span> '
        '<span class="pre">k``（</span> <span class="pre">``k</span></code> 是序号</p>',
        "<p>见 :func:`ln_tutorial.layer_norm`。</p>",
        "<p>其中 :math:`x` 是输入</p>",
        "<p>见 {doc}`api`。</p>",
        "<p>**实测（第 72 次运行）。**接着</p>",
        "<p>这是一个*定义*。</p>",
        "<p>文件 `ln_tutorial/launch.py`。</p>",
    ],
)
def test_the_check_sees_planted_raw_markup(body):
    assert raw_markup(PAGE.format(body)), body


@pytest.mark.parametrize(
    "body",
    [
        '<p>程序 <code class="docutils literal notranslate"><span class="pre">2r + k</span></code> （序号）</p>',
        '<p>公式 <span class="math notranslate nohighlight">\\(a * b * c\\)</span></p>',
        '<div class="highlight"><pre>x = a ** 2  # `code`</pre></div>',
        "<p><strong>实测。</strong> <em>定义</em> 2 * 3 与 4 * 5，按 2**31 取模</p>",
        '<script>var s = "``";</script><p>正文<br>换行</p>',
    ],
)
def test_the_check_passes_rendered_markup(body):
    assert not raw_markup(PAGE.format(body)), body
