"""The reading budget of the core tutorial pages (docs/_ext/ln_gallery.py).

The docs build itself enforces it: after the English edition is written, a
core page over budget is a warning, and ``-W`` makes it an error. These tests
check the counter, and the built site when there is one (``tox -e docs`` runs
after ``tox -e py`` in CI, so there they usually find none and skip).
"""

import re
from pathlib import Path

import pytest

from helpers import load_module

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "docs" / "_build" / "html"
ln_gallery = load_module("ln_gallery", ROOT / "docs" / "_ext" / "ln_gallery.py")

PAGE = """<html><body><div itemprop="articleBody">
<h1>Title here</h1><p>Some prose, with <code class="x">inline_code words</code> and a x.</p>
<div class="highlight"><pre>line one
line two
</pre></div><script>var hidden = "words";</script>
</div><footer>not counted at all</footer></body></html>"""


def test_the_counter_counts_prose_words_and_code_lines():
    # "Title here Some prose with and" are words; "a", "x", code, script and footer are not.
    assert ln_gallery.reading_budget(PAGE) == (6, 2)


def test_a_page_over_budget_is_reported(tmp_path):
    words = " ".join(["word"] * (ln_gallery.BUDGET_WORDS + 1))
    for page in ln_gallery.CORE_PAGES:
        path = tmp_path / f"{page}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(PAGE.replace("Some prose", words if page.endswith("02_backward") else "Some prose"))
    problems = ln_gallery.over_budget(tmp_path)
    assert len(problems) == 1 and "02_backward" in problems[0]


def _built(lang="en"):
    if not (SITE / lang / "tutorials" / "01_forward.html").exists():
        pytest.skip("the site is not built (tox -e docs)")
    return SITE / lang


def test_the_built_core_pages_are_within_budget():
    assert ln_gallery.over_budget(_built()) == []


#: Reading time of the core path: prose at 200 words a minute, shown code and printed output at 20
#: lines a minute, a minute per figure; the core pages together in at most 40 minutes.
WORDS_PER_MINUTE, LINES_PER_MINUTE, MINUTES_PER_FIGURE, CORE_MINUTES = 200, 20, 1.0, 40


def reading_minutes(page_html: str) -> float:
    words, code = ln_gallery.reading_budget(page_html)
    figures = len(re.findall(r"<img[^>]*sphx-glr-(?:single|multi)-img", page_html))
    return words / WORDS_PER_MINUTE + code / LINES_PER_MINUTE + figures * MINUTES_PER_FIGURE


def test_the_reading_time_counts_words_code_and_figures():
    figure = '<img src="a.png" class = "sphx-glr-single-img"/>'
    page = PAGE.replace("</div><footer>", figure + "</div><footer>")
    assert reading_minutes(page) == 6 / 200 + 2 / 20 + 1.0


def test_the_built_core_path_reads_in_40_minutes():
    minutes = {page: reading_minutes((_built() / f"{page}.html").read_text(encoding="utf-8"))
               for page in ln_gallery.CORE_PAGES}
    assert sum(minutes.values()) <= CORE_MINUTES, {p: round(m, 1) for p, m in minutes.items()}


def test_the_built_site_offers_the_standalone_script():
    script = _built() / "_downloads" / "standalone" / "layer_norm_triton.py"
    assert script.read_bytes() == (ROOT / "ln_tutorial_book" / "plain.py").read_bytes()
    for page in ln_gallery.CORE_PAGES:
        html = (_built() / f"{page}.html").read_text(encoding="utf-8")
        assert "../_downloads/standalone/layer_norm_triton.py" in html, f"{page} does not link the script"


def test_the_chinese_edition_offers_the_translated_standalone_script():
    import sys

    script = _built("zh_CN") / "_downloads" / "standalone" / "layer_norm_triton.py"
    downloads = load_module("ln_i18n_downloads", ROOT / "docs" / "_ext" / "ln_i18n_downloads.py")
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))  # it imports ln_gallery
    try:
        assert script.read_bytes() == downloads.standalone_script(ROOT / "docs", "zh_CN")
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
