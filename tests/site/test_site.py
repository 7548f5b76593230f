"""The built site, verified like a reader.

`docs/_build/html/` is served on 127.0.0.1 and driven in a real headless Chromium
(Debian's ``chromium`` with Playwright for Python); the downloads are fetched over
HTTP and executed on the CPU.  Checked, for both editions:

* every HTML page: HTTP 200, no JavaScript error, no failed local request, no
  request that leaves 127.0.0.1 (every request is routed; foreign ones are
  recorded and aborted), every ``<img>`` loaded, no raw TeX or reST left visible;
* the three tutorial pages and the gallery index: ``<html lang>``, formulas
  typeset by MathJax (every ``.math`` element holds an ``mjx-container``, no
  MathJax error), the expected figures, a full-page screenshot saved under
  ``docs/_build/screenshots/`` (git-ignored: look at them);
* the language switch, by clicking: en -> zh_CN -> en on the same page;
* the root ``index.html`` sends the reader to the edition of the browser's language;
* search finds a word of the page's language;
* the download links (``.py``, ``.ipynb``, the zips) resolve to valid, non-empty
  files; no raw reST directive in the notebooks; the Chinese downloads carry
  Chinese prose and exactly the English code;
* the downloaded forward and backward notebooks execute end to end on the CPU
  (nbclient, GPU hidden, ``TRITON_INTERPRET`` *not* set: the notebooks must switch
  themselves to the interpreter and say so), and the downloaded benchmark script
  runs on the CPU from the recorded results.

These tests are opt-in (``tox -e site``, ``.ci/site``, ``LN_TUTORIAL_SITE=1`` or
``-m site``): a plain ``pytest`` / ``tox -e py`` skips them.  When the site or
the browser is missing they skip with the reason, except under ``CI=true``,
where they fail instead.
"""

from __future__ import annotations

import ast
import functools
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.site

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("LN_TUTORIAL_SITE_DIR", ROOT / "docs" / "_build" / "html"))
SCREENSHOTS = SITE.parent / "screenshots"  # docs/_build/screenshots/, git-ignored
ARTIFACTS = SITE.parent / "site-tests"  # the executed notebooks and the script's output
IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}

TUTORIALS = ["01_forward", "02_backward", "03_benchmark", "04_forward_advanced", "05_backward_advanced"]
EXECUTED_NOTEBOOKS = ["01_forward", "02_backward"]
HTML_LANG = {"en": "en", "zh_CN": "zh-CN"}
BROWSER_LOCALE = {"en": "en-US", "zh_CN": "zh-CN"}
# figures (<img>) a reader must see on each tutorial page at least
MIN_IMAGES = {"01_forward": 1, "02_backward": 1, "03_benchmark": 2}
# pages that must carry typeset formulas
MATH_PAGES = {"01_forward", "02_backward"}
# words a reader searches for; the Chinese ones need jieba at build time (Sphinx indexes no
# Chinese word without it), and 层归一化 (a glossary term) needs it in jieba's user dictionary
SEARCH_WORDS = {"en": ["normalization", "Jacobian"], "zh_CN": ["归一化", "层归一化"]}
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NAV_TIMEOUT_MS = 60_000
CJK = re.compile(r"[\u4e00-\u9fff]")


LANGS = ["en", "zh_CN"]


def _edition_built(lang: str) -> None:
    if not (SITE / lang / "index.html").is_file():
        pytest.fail(f"the {lang} edition is not built: {SITE / lang}/index.html is missing", pytrace=False)


def _unavailable(reason: str):
    """Skip with the reason, but fail under CI=true: CI must run these tests."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: the site tests must run in CI)", pytrace=False)
    pytest.skip(reason)


def _opted_in(config) -> bool:
    if os.environ.get("LN_TUTORIAL_SITE", "").strip().lower() in {"1", "true", "yes"}:
        return True
    markexpr = config.getoption("markexpr", "") or ""
    return re.search(r"(?<!not )\bsite\b", markexpr) is not None


@pytest.fixture(scope="session", autouse=True)
def _site_tests_opt_in(request):
    if not _opted_in(request.config):
        pytest.skip("site tests are opt-in: run `tox -e site` or `.ci/site` (or set LN_TUTORIAL_SITE=1, or -m site)")


# --- the server ---------------------------------------------------------------------
class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".woff": "font/woff",
        ".woff2": "font/woff2",
        ".ipynb": "application/x-ipynb+json",
    }

    def log_message(self, format, *args):  # noqa: A002 - keep the test output clean
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):  # a browser closing a tab is fine
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def site() -> Path:
    if not (SITE / "en" / "tutorials" / "01_forward.html").is_file():
        _unavailable(f"the site is not built: {SITE}/en/tutorials/01_forward.html is missing (run `tox -e docs`)")
    return SITE


@pytest.fixture(scope="module")
def base_url(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _fetch(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 - our own 127.0.0.1 server
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


# --- the browser --------------------------------------------------------------------
def _chromium_path() -> str | None:
    for cand in (os.environ.get("LN_TUTORIAL_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium",
                 shutil.which("chromium-browser")):
        if cand and Path(cand).is_file():
            return cand
    return None


@pytest.fixture(scope="module")
def browser(site):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright for Python is not installed (pip install playwright)")
    exe = _chromium_path()
    if exe is None:
        _unavailable("no Chromium: apt-get install chromium (or set LN_TUTORIAL_CHROMIUM)")
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
    except Exception as err:  # pragma: no cover - environment problem
        pw.stop()
        _unavailable(f"Chromium at {exe} did not start: {err}")
    try:
        yield b
    finally:
        b.close()
        pw.stop()


class Visit:
    """What a reader's browser saw on one page: collected once, asserted by several tests."""

    def __init__(self, url: str):
        self.url = url
        self.status: int | None = None
        self.final_url = url
        self.html_lang: str | None = None
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.foreign_requests: list[str] = []
        self.failed_requests: list[str] = []
        self.bad_responses: list[str] = []
        self.images: list[dict] = []
        self.math: dict = {}
        self.raw_markup: list[str] = []
        self.links: list[str] = []
        self.control_chars: list[str] = []
        self.outputs: list[str] = []  # sphinx-gallery's "Out:" blocks
        self.screenshot: Path | None = None
        self.load_s = 0.0

    def problems(self) -> list[str]:
        out = []
        out += [f"JavaScript console error: {m}" for m in self.console_errors]
        out += [f"uncaught JavaScript exception: {m}" for m in self.page_errors]
        out += [f"request leaving the site (blocked): {u}" for u in self.foreign_requests]
        out += [f"failed request: {u}" for u in self.failed_requests]
        out += [f"HTTP error: {u}" for u in self.bad_responses]
        out += [f"image not loaded: {i['src']}" for i in self.images if not i["ok"]]
        out += [f"raw markup visible: {t!r}" for t in self.raw_markup]
        out += [f"control character in the HTML (a non-raw docstring? '\\f' of '\\frac'...): {t!r}"
                for t in self.control_chars]
        return out


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _control_chars(text: str) -> list[str]:
    """Snippets around characters that no page or notebook should hold ('\\frac' in a non-raw string -> '\\x0crac')."""
    return [text[max(0, m.start() - 40):m.end() + 40] for m in _CONTROL.finditer(text)][:10]


_ROUTED_SCHEMES = {"http", "https", "ws", "wss", "ftp"}

# Visible text nodes outside code and typeset math, searched for TeX or reST left raw.
_RAW_MARKUP_JS = r"""
() => {
  const pat = /\\(frac|hat|sum|sqrt|begin|end|mathbf|mathrm|partial|nabla|odot|mu|sigma|epsilon|left|right|cdot)\b|\$\$|\\\(|\\\)|\\\[|\\\]|:(math|func|class|meth|ref|doc|mod|attr|eq):`|(^|\n)\s*\.\. [a-z][\w-]*::/;
  const skip = 'script,style,noscript,pre,code,kbd,samp,textarea,mjx-container,mjx-assistive-mml,.highlight,.math';
  const hits = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || el.closest(skip)) continue;
    if (!el.checkVisibility || !el.checkVisibility()) continue;
    const t = n.textContent;
    if (pat.test(t)) hits.push(t.trim().slice(0, 160));
  }
  return hits;
}
"""

# MathJax 3: wait for the typesetting promise, then look at every Sphinx math element.
_MATH_JS = r"""
async () => {
  const mj = window.MathJax;
  if (!mj || !mj.startup || !mj.startup.promise) return {loaded: false};
  await mj.startup.promise;
  const els = Array.from(document.querySelectorAll('.math'));
  return {
    loaded: true,
    version: mj.version || null,
    elements: els.length,
    typeset: els.filter(e => e.querySelector('mjx-container')).length,
    containers: document.querySelectorAll('mjx-container').length,
    errors: Array.from(document.querySelectorAll('mjx-merror, [data-mjx-error]'))
              .map(e => (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 160)),
    untypeset: els.filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 120)),
  };
}
"""

_IMAGES_JS = r"""
async () => {
  const imgs = Array.from(document.images);
  imgs.forEach(i => { i.loading = 'eager'; });
  await Promise.all(imgs.map(i => i.complete ? null : new Promise(r => {
    i.addEventListener('load', r, {once: true}); i.addEventListener('error', r, {once: true});
    setTimeout(r, 20000);
  })));
  return imgs.map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0,
                         w: i.naturalWidth, h: i.naturalHeight}));
}
"""

_HAS_MATHJAX_SCRIPT_JS = "() => Array.from(document.scripts).some(s => /mathjax/i.test(s.src || ''))"


def _new_context(browser, base_url, locale="en-US"):
    """A fresh browser context where every request is routed; foreign ones are recorded and aborted."""
    ctx = browser.new_context(locale=locale, viewport={"width": 1280, "height": 900}, service_workers="block")
    ctx.set_default_timeout(15_000)
    ctx.set_default_navigation_timeout(NAV_TIMEOUT_MS)
    origin = urllib.parse.urlsplit(base_url).netloc
    ctx.foreign_requests = []  # type: ignore[attr-defined]

    def route(r):
        parts = urllib.parse.urlsplit(r.request.url)
        if parts.scheme in _ROUTED_SCHEMES and parts.netloc != origin:
            ctx.foreign_requests.append(r.request.url)  # type: ignore[attr-defined]
            r.abort("blockedbyclient")
        else:
            r.continue_()

    ctx.route("**/*", route)
    return ctx


def _attach_recorders(page, visit: Visit, ctx):
    page.on("console", lambda m: m.type == "error" and visit.console_errors.append(
        f"{m.text} ({(m.location or {}).get('url', '')})"))
    page.on("pageerror", lambda e: visit.page_errors.append(str(e)))
    page.on("requestfailed", lambda r: r.url not in ctx.foreign_requests and visit.failed_requests.append(
        f"{r.url}: {r.failure}"))
    page.on("response", lambda r: r.status >= 400 and visit.bad_responses.append(f"{r.status} {r.url}"))


def _visit(browser, base_url, path: str, screenshot: str | None = None, locale="en-US") -> Visit:
    visit = Visit(urllib.parse.urljoin(base_url, path))
    ctx = _new_context(browser, base_url, locale)
    page = ctx.new_page()
    _attach_recorders(page, visit, ctx)
    t0 = time.monotonic()
    try:
        resp = page.goto(visit.url, wait_until="load")
        visit.status = resp.status if resp else None
        visit.final_url = page.url
        if visit.status != 200:
            return visit
        visit.control_chars = _control_chars(page.content())
        visit.html_lang = page.evaluate("() => document.documentElement.getAttribute('lang')")
        if page.evaluate(_HAS_MATHJAX_SCRIPT_JS):
            page.wait_for_function("() => window.MathJax && window.MathJax.startup && window.MathJax.startup.promise",
                                   timeout=NAV_TIMEOUT_MS)
        visit.math = page.evaluate(_MATH_JS)
        visit.images = page.evaluate(_IMAGES_JS)
        visit.raw_markup = page.evaluate(_RAW_MARKUP_JS)
        visit.outputs = page.evaluate(
            "() => Array.from(document.querySelectorAll('.sphx-glr-script-out')).map(e => e.innerText)")
        visit.links = page.evaluate("() => Array.from(document.querySelectorAll('a[href]')).map(a => a.href)")
        page.wait_for_load_state("networkidle")
        if screenshot:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            visit.screenshot = SCREENSHOTS / f"{screenshot}.png"
            page.screenshot(path=str(visit.screenshot), full_page=True)
    finally:
        visit.load_s = time.monotonic() - t0
        visit.foreign_requests = list(ctx.foreign_requests)  # type: ignore[attr-defined]
        ctx.close()
    return visit


@pytest.fixture(scope="module")
def visit(browser, base_url):
    """visit(lang, page) -> Visit, cached: each page is loaded once per test module."""
    cache: dict[tuple[str, str], Visit] = {}

    def get(lang: str, page: str) -> Visit:
        key = (lang, page)
        if key not in cache:
            shot = f"{lang}_{page.removeprefix('tutorials/')}" if page.startswith("tutorials/") else None
            cache[key] = _visit(browser, base_url, f"{lang}/{page}.html", screenshot=shot,
                                locale=BROWSER_LOCALE[lang])
        return cache[key]

    return get


def _edition_pages(lang: str) -> list[str]:
    """Every HTML page of an edition, as 'dir/name' without .html, Sphinx's own internals left out."""
    root = SITE / lang
    out = []
    for p in sorted(root.rglob("*.html")):
        rel = p.relative_to(root)
        if rel.parts[0].startswith("_"):
            continue
        out.append(rel.with_suffix("").as_posix())
    return out


# --- 1. every page of each edition is clean -------------------------------------------
@pytest.mark.parametrize("lang", LANGS)
def test_every_page_of_the_edition_is_clean(visit, lang):
    _edition_built(lang)
    pages = _edition_pages(lang)
    assert pages, f"no HTML page under {SITE / lang}"
    for must in [f"tutorials/{t}" for t in TUTORIALS] + ["tutorials/index", "index"]:
        assert must in pages, f"{lang}/{must}.html is missing"
    problems = []
    for page in pages:
        v = visit(lang, page)
        if v.status != 200:
            problems.append(f"{lang}/{page}.html: HTTP {v.status}")
            continue
        if v.html_lang != HTML_LANG[lang]:
            problems.append(f"{lang}/{page}.html: <html lang={v.html_lang!r}>, expected {HTML_LANG[lang]!r}")
        if v.math.get("errors"):
            problems.append(f"{lang}/{page}.html: MathJax errors {v.math['errors']}")
        if v.math.get("elements") and v.math.get("typeset") != v.math.get("elements"):
            problems.append(f"{lang}/{page}.html: formulas not typeset: {v.math.get('untypeset')}")
        problems += [f"{lang}/{page}.html: {p}" for p in v.problems()]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("lang", LANGS)
def test_every_local_link_resolves(visit, base_url, lang):
    """Every link from the tutorial pages and the gallery index into the site answers 200."""
    _edition_built(lang)
    targets: dict[str, str] = {}
    for page in [f"tutorials/{t}" for t in TUTORIALS] + ["tutorials/index"]:
        for href in visit(lang, page).links:
            if href.startswith(base_url):
                targets.setdefault(href.split("#")[0], page)
    assert targets, "no local links collected"
    broken = [f"{url} (from {lang}/{page}.html): HTTP {status}"
              for url, page in sorted(targets.items())
              if (status := _fetch(url)[0]) != 200]
    assert not broken, "\n".join(broken)


# --- 2. the tutorial pages, in detail ---------------------------------------------------
@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", TUTORIALS + ["index"])
def test_tutorial_page(visit, lang, name):
    _edition_built(lang)
    v = visit(lang, f"tutorials/{name}")
    assert v.status == 200, f"{v.url}: HTTP {v.status}"
    assert v.html_lang == HTML_LANG[lang], f"<html lang={v.html_lang!r}>"
    problems = v.problems()
    # formulas: typeset by MathJax, none left raw, no TeX error
    if name in MATH_PAGES:
        if not v.math.get("loaded"):
            problems.append("MathJax did not load (window.MathJax.startup missing)")
        elif not v.math.get("elements"):
            problems.append("no formula (.math element) on a page that must show the maths")
        elif v.math["typeset"] != v.math["elements"] or v.math["containers"] == 0:
            problems.append(f"{v.math['elements'] - v.math['typeset']} of {v.math['elements']} formulas "
                            f"not typeset: {v.math['untypeset']}")
    if v.math.get("errors"):
        problems.append(f"MathJax errors: {v.math['errors']}")
    # the examples ran when the site was built: their printed output is on the page, without a traceback
    if name in TUTORIALS:
        if not v.outputs:
            problems.append("no printed output (sphinx-gallery 'Out:' block): was the example executed?")
        problems += [f"a traceback in the printed output: {o[-300:]!r}" for o in v.outputs if "Traceback" in o]
    # figures
    shown = [i for i in v.images if i["ok"]]
    if name in MIN_IMAGES and len(shown) < MIN_IMAGES[name]:
        problems.append(f"{len(shown)} images shown, expected at least {MIN_IMAGES[name]}")
    assert not problems, f"{v.url}:\n" + "\n".join(problems)
    assert v.screenshot is not None and v.screenshot.stat().st_size > 10_000, "no screenshot"


def test_chinese_fonts_for_screenshots():
    """Without a CJK font the zh_CN screenshots show empty boxes (Debian: fonts-noto-cjk)."""
    if not shutil.which("fc-list"):
        pytest.skip("fc-list not available")
    out = subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True).stdout
    if not out.strip():
        _unavailable("no Chinese font installed: apt-get install fonts-noto-cjk")


# --- 3. the language switch, by clicking ---------------------------------------------
def _other_edition_url(url: str, base_url: str, to: str) -> str:
    rel = url[len(base_url):].split("#")[0]
    lang, rest = rel.split("/", 1)
    return f"{base_url}{to}/{rest}"


def _click_switch(page, target: str):
    """Click the visible link on the page that leads to `target` (the same page, other edition)."""
    n = page.evaluate(
        """(target) => {
             let n = 0;
             for (const a of document.querySelectorAll('a[href]')) {
               if (a.href.split('#')[0] === target) { a.setAttribute('data-ln-test-switch', ''); n++; }
             }
             return n;
           }""",
        target,
    )
    assert n, f"no link on {page.url} leads to the same page in the other edition ({target})"
    links = page.locator("[data-ln-test-switch]")
    visible = [links.nth(i) for i in range(links.count()) if links.nth(i).is_visible()]
    if not visible:
        # a flyout in the theme's style: open it first
        for toggle in ("[data-toggle='rst-current-version']", ".rst-current-version", "details > summary"):
            t = page.locator(toggle)
            if t.count() and t.first.is_visible():
                t.first.click()
                break
        visible = [links.nth(i) for i in range(links.count()) if links.nth(i).is_visible()]
    assert visible, f"the link to {target} exists but a reader cannot see it on {page.url}"
    with page.expect_navigation():
        visible[0].click()
    assert page.url.split("#")[0] == target, f"clicked the switch, landed on {page.url}, expected {target}"


@pytest.mark.parametrize("name", TUTORIALS + ["index"])
def test_language_switch_round_trip(browser, base_url, name):
    _edition_built("zh_CN")
    ctx = _new_context(browser, base_url)
    errors: list[str] = []
    try:
        page = ctx.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        en = f"{base_url}en/tutorials/{name}.html"
        assert page.goto(en).status == 200
        zh = _other_edition_url(en, base_url, "zh_CN")
        _click_switch(page, zh)
        assert page.evaluate("() => document.documentElement.lang") == "zh-CN"
        _click_switch(page, en)
        assert page.evaluate("() => document.documentElement.lang") == "en"
        assert not ctx.foreign_requests, ctx.foreign_requests  # type: ignore[attr-defined]
        assert not errors, errors
    finally:
        ctx.close()


@pytest.mark.parametrize("lang", LANGS)
def test_root_index_sends_reader_to_their_edition(browser, base_url, lang):
    _edition_built(lang)
    assert _fetch(base_url + "index.html")[0] == 200, "no root index.html"
    ctx = _new_context(browser, base_url, locale=BROWSER_LOCALE[lang])
    try:
        page = ctx.new_page()
        page.goto(base_url + "index.html")
        page.wait_for_url(re.compile(re.escape(f"{base_url}{lang}/")), timeout=15_000)
        assert page.evaluate("() => document.documentElement.lang") == HTML_LANG[lang]
        assert not ctx.foreign_requests, ctx.foreign_requests  # type: ignore[attr-defined]
    finally:
        ctx.close()
    # plain links to both editions (a reader without JavaScript)
    _, body = _fetch(base_url + "index.html")
    hrefs = re.findall(rb'href="([^"]+)"', body)
    for ed in LANGS:
        assert any(h.lstrip(b"./").startswith(ed.encode() + b"/") for h in hrefs), f"no plain link to {ed}/"


@pytest.mark.parametrize("lang", LANGS)
def test_search_finds_words_of_the_edition(browser, base_url, lang):
    _edition_built(lang)
    ctx = _new_context(browser, base_url, locale=BROWSER_LOCALE[lang])
    errors: list[str] = []
    missed = []
    try:
        page = ctx.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        for word in SEARCH_WORDS[lang]:
            resp = page.goto(f"{base_url}{lang}/search.html?q={urllib.parse.quote(word)}")
            assert resp.status == 200
            try:  # Sphinx fills .search-summary when the search is done
                page.wait_for_function(
                    "() => { const s = document.querySelector('#search-results .search-summary');"
                    " return s && s.textContent.trim().length > 0; }", timeout=20_000)
            except Exception:
                pytest.fail(f"searching {word!r} in {lang} never finished; JavaScript errors: {errors}", pytrace=False)
            if page.locator("#search-results ul.search li").count() == 0:
                missed.append(word)
        assert not missed, f"searching {lang} finds nothing for {missed}"
        assert not errors, errors
        assert not ctx.foreign_requests, ctx.foreign_requests  # type: ignore[attr-defined]
    finally:
        ctx.close()


# --- 4. the downloads -------------------------------------------------------------------
def _downloads(v: Visit, base_url: str) -> dict[str, str]:
    """file name -> URL for every link to a .py, .ipynb or .zip file in the site."""
    out = {}
    for href in v.links:
        url = href.split("#")[0]
        if url.startswith(base_url) and re.search(r"\.(py|ipynb|zip)$", url):
            out[url.rsplit("/", 1)[1]] = url
    return out


_RST_DIRECTIVE = re.compile(r"^\s*\.\. [a-zA-Z][\w-]*::", re.M)


def _code_of_py(src) -> str:
    """The code of a script, prose left out: its AST without the module docstring, every string blanked
    (the Chinese downloads translate printed strings and labels; comments are not in the AST)."""
    tree = ast.parse(src)
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
        tree.body = tree.body[1:]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    return ast.dump(tree)


def _nb(data: bytes):
    import nbformat

    nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    nbformat.validate(nb)
    return nb


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", TUTORIALS)
def test_tutorial_downloads(visit, base_url, lang, name):
    _edition_built(lang)
    v = visit(lang, f"tutorials/{name}")
    assert v.status == 200
    dl = _downloads(v, base_url)
    for ext in ("py", "ipynb"):
        assert f"{name}.{ext}" in dl, f"no {name}.{ext} download link on {v.url} (links: {sorted(dl)})"
    files = {}
    for fname, url in dl.items():
        status, data = _fetch(url)
        assert status == 200, f"{url}: HTTP {status}"
        assert data, f"{url}: empty file"
        files[fname] = data
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. SyntaxWarning: invalid escape sequence '\h' (a non-raw docstring)
        compile(files[f"{name}.py"], f"{name}.py", "exec")
    nb = _nb(files[f"{name}.ipynb"])
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    left = _RST_DIRECTIVE.findall(prose)
    assert not left, f"{name}.ipynb ({lang}): raw reST directives left in the notebook: {left}"
    bad = _control_chars(prose)
    assert not bad, f"{name}.ipynb ({lang}): control characters in the prose (a non-raw docstring?): {bad}"
    if name in EXECUTED_NOTEBOOKS:
        assert "@triton.jit" in code or "@triton.jit" in prose, (
            f"{name}.ipynb ({lang}) does not show the kernel source")
    for fname, data in files.items():
        if fname.endswith(".zip"):
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                assert z.testzip() is None and z.namelist(), f"{fname}: bad zip"
    if lang == "zh_CN":
        assert CJK.search(prose), f"{name}.ipynb (zh_CN): the notebook's prose is not in Chinese"
        assert CJK.search(files[f"{name}.py"].decode("utf-8")), f"{name}.py (zh_CN): the script's prose is not in Chinese"
        en = _downloads(visit("en", f"tutorials/{name}"), base_url)
        en_nb = _nb(_fetch(en[f"{name}.ipynb"])[1])
        assert _code_of_py(code) == _code_of_py(
            "\n".join(c.source for c in en_nb.cells if c.cell_type == "code")), f"{name}.ipynb: zh_CN code differs from en"
        assert _code_of_py(files[f"{name}.py"]) == _code_of_py(_fetch(en[f"{name}.py"])[1]), (
            f"{name}.py: zh_CN code differs from en")


@pytest.mark.parametrize("lang", LANGS)
def test_gallery_zips(visit, base_url, lang):
    _edition_built(lang)
    v = visit(lang, "tutorials/index")
    assert v.status == 200
    zips = {f: u for f, u in _downloads(v, base_url).items() if f.endswith(".zip")}
    assert zips, f"no zip download on {v.url}"
    members = set()
    for fname, url in zips.items():
        status, data = _fetch(url)
        assert status == 200 and data, f"{url}: HTTP {status}, {len(data)} bytes"
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            assert z.testzip() is None, f"{fname}: corrupt"
            members |= {Path(n).name for n in z.namelist()}
    for t in TUTORIALS:
        for ext in ("py", "ipynb"):
            assert f"{t}.{ext}" in members, f"{t}.{ext} is in no zip of the gallery index ({sorted(members)})"


# --- 5. the downloads run on the CPU ---------------------------------------------------
def _cpu_env(tmp: Path) -> dict[str, str]:
    """The environment of a reader with no GPU who did not read the instructions: no TRITON_INTERPRET."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    env.update(CUDA_VISIBLE_DEVICES="", MPLBACKEND="Agg", PYTHONUNBUFFERED="1",
               JUPYTER_PATH=str(tmp / "jupyter"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
               JUPYTER_CONFIG_DIR=str(tmp / "config"), IPYTHONDIR=str(tmp / "ipython"),
               JUPYTER_PLATFORM_DIRS="1")
    return env


# Runs in a subprocess (the Triton interpreter can take a process down; nbclient keeps
# its own event loop away from Playwright's).  The kernel is this Python, via a private kernelspec.
_RUN_NOTEBOOK = r"""
import json, sys, time, nbformat
from nbclient import NotebookClient
src, dst = sys.argv[1], sys.argv[2]
nb = nbformat.read(src, as_version=4)
t0 = time.monotonic()
client = NotebookClient(nb, kernel_name="ln-site-test", timeout=900, resources={"metadata": {"path": sys.argv[3]}})
try:
    client.execute()
finally:
    nbformat.write(nb, dst)
print(json.dumps({"seconds": time.monotonic() - t0}))
"""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _notebook_text_outputs(nb) -> str:
    out = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            if o.get("output_type") == "stream":
                out.append(o.get("text", ""))
            elif "data" in o:
                out.append(o["data"].get("text/plain", ""))
    return "\n".join(out)


@pytest.mark.parametrize("name", EXECUTED_NOTEBOOKS)
def test_downloaded_notebook_runs_on_cpu(visit, base_url, tmp_path, name):
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    v = visit("en", f"tutorials/{name}")
    url = _downloads(v, base_url).get(f"{name}.ipynb")
    assert url, f"no notebook download on {v.url}"
    status, data = _fetch(url)
    assert status == 200 and data
    work = tmp_path / "reader"
    work.mkdir()
    (work / f"{name}.ipynb").write_bytes(data)
    kdir = tmp_path / "jupyter" / "kernels" / "ln-site-test"
    kdir.mkdir(parents=True)
    (kdir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "ln_tutorial site test", "language": "python"}))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    executed = ARTIFACTS / f"{name}.executed.ipynb"
    proc = subprocess.run([sys.executable, "-c", _RUN_NOTEBOOK, str(work / f"{name}.ipynb"), str(executed), str(work)],
                          env=_cpu_env(tmp_path), cwd=work, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, (f"{name}.ipynb failed on the CPU (executed copy: {executed}):\n"
                                  f"{proc.stdout[-3000:]}\n{_ANSI.sub('', proc.stderr)[-6000:]}")
    import nbformat

    text = _notebook_text_outputs(nbformat.read(executed, as_version=4))
    assert re.search(r"interpret", text, re.I), (
        f"{name}.ipynb ran, but never told the reader it switched to the Triton interpreter (no GPU)")


# The script as a reader runs it (`python 03_benchmark.py`, run as __main__), then every
# figure it drew is saved and described: on a CPU it must plot the recorded GPU results.
_RUN_SCRIPT = r"""
import json, runpy, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
figs = []
for num in plt.get_fignums():
    fig = plt.figure(num)
    path = f"{OUT}/03_benchmark_figure{num}.png"
    fig.savefig(path)
    figs.append({"path": path, "lines": sum(len([l for l in ax.lines if len(l.get_xdata())]) for ax in fig.axes),
                 "titles": [ax.get_title() for ax in fig.axes]})
print("FIGURES " + json.dumps(figs))
"""


def test_downloaded_benchmark_script_runs_on_cpu(visit, base_url, tmp_path):
    v = visit("en", "tutorials/03_benchmark")
    url = _downloads(v, base_url).get("03_benchmark.py")
    assert url, f"no 03_benchmark.py download on {v.url}"
    status, data = _fetch(url)
    assert status == 200 and data
    work = tmp_path / "reader"
    work.mkdir()
    (work / "03_benchmark.py").write_bytes(data)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("03_benchmark_figure*.png"):
        old.unlink()
    runner = _RUN_SCRIPT.replace("{OUT}", str(ARTIFACTS))
    proc = subprocess.run([sys.executable, "-c", runner, "03_benchmark.py"], env=_cpu_env(tmp_path), cwd=work,
                          capture_output=True, text=True, timeout=900)
    (ARTIFACTS / "03_benchmark.out.txt").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    assert proc.returncode == 0, f"03_benchmark.py failed on the CPU:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    figs = json.loads(proc.stdout.rsplit("FIGURES ", 1)[1])
    plotted = [f for f in figs if f["lines"] >= 2]
    assert len(plotted) >= 2, (
        f"03_benchmark.py ran on the CPU but drew {len(plotted)} plot(s) with data ({figs}); it must plot the "
        f"recorded forward and backward GB/s. Its output:\n{proc.stdout[-2000:]}")
