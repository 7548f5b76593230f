"""Build the ln_tutorial site: every edition, and the root page that picks one.

    python docs/build.py              # what ``tox -e docs`` runs
    python docs/build.py --keep-cache # reuse examples already executed
    python docs/build.py --gettext    # only the message templates (no example runs)

Steps:

1. The English edition, ``sphinx-build -W --keep-going`` into
   ``docs/_build/html/en/``. This runs the gallery scripts (conf.py first
   expands their source markers into ``docs/_generated/examples/``).
2. Every other edition that has catalogs in ``docs/locale/<lang>/LC_MESSAGES/``
   (``zh_CN``), with ``-D language=<lang>`` into ``docs/_build/html/<lang>/``
   and its own doctree directory. The source and gallery directories are the
   same, so sphinx-gallery finds the scripts unchanged (md5) and reuses the
   executed results: the examples run once, not once per language.
3. ``docs/_build/html/index.html``: sends the reader to the edition matching
   the browser's language, with plain links to every edition; ``404.html``,
   the page a static host (GitHub Pages) shows for a missing address.
4. With ``LN_TUTORIAL_BASE_URL`` set to the address the site is published at
   (the Pages workflow sets it), every page carries its canonical link
   (conf.py sets ``html_baseurl``) and ``sitemap.xml`` lists every page of
   every edition with its translations. Without it, neither is written: both
   need absolute addresses.

Any warning fails the build (after all pages are tried, ``--keep-going``);
a failing example fails it too. By default the gallery output is removed
first, so every script runs against the current package.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from xml.sax.saxutils import quoteattr

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
BUILD = DOCS / "_build"
HTML = BUILD / "html"
LABELS = {"en": "English", "zh_CN": "简体中文"}
# Browser language prefixes that choose an edition other than English.
BROWSER_PREFIXES = {"zh_CN": ["zh"]}
# What sphinx-gallery writes into the source tree (git-ignored).
GALLERY_OUTPUTS = [DOCS / "tutorials", DOCS / "sg_execution_times.rst", DOCS / "_generated"]
# Where the site is published (https://host/path/); conf.py reads it too.
BASE_URL_VARIABLE = "LN_TUTORIAL_BASE_URL"
# Pages of an edition that are no content of their own: not in the sitemap.
NOT_IN_SITEMAP = {"search.html", "genindex.html", "py-modindex.html"}


def editions() -> list[str]:
    """English plus every language that has catalogs."""
    found = ["en"]
    locale = DOCS / "locale"
    if locale.is_dir():
        for lang_dir in sorted(p for p in locale.iterdir() if p.is_dir()):
            if any((lang_dir / "LC_MESSAGES").rglob("*.po")):
                found.append(lang_dir.name)
    return found


def sphinx(builder: str, out: Path, doctrees: Path, *extra: str) -> None:
    cmd = [sys.executable, "-m", "sphinx", "-b", builder, "-W", "--keep-going", "-q", "-j", "1",
           "-d", str(doctrees), *extra, str(DOCS), str(out)]  # fmt: skip
    print("+", " ".join(cmd), flush=True)
    result = subprocess.run(cmd, cwd=ROOT)
    if result.returncode:
        sys.exit(f"docs/build.py: sphinx-build ({builder}) failed with exit code {result.returncode}")


# A resource the browser would fetch from elsewhere: <script src>, <link href>, <img src>, ...
_REMOTE = re.compile(
    r"<(?:script|link|img|iframe|source|video|audio|embed)\b[^>]*?\s(?:src|href)\s*=\s*[\"']?(?:https?:)?//",
    re.I,
)


_REMOTE_CSS = re.compile(r"(?:url\(\s*[\"']?|@import\s+[\"'])(?:https?:)?//[^)\"']*", re.I)


def remote_resources(html_dir: Path) -> list[str]:
    """Pages of ``html_dir`` that would make the browser fetch from another site, with the tag."""
    found = []
    for page in sorted(html_dir.rglob("*.html")):
        for match in _REMOTE.finditer(page.read_text(encoding="utf-8", errors="replace")):
            tag = page.read_text(encoding="utf-8", errors="replace")[match.start():].split(">", 1)[0]
            if re.search(r"\brel\s*=\s*[\"']?(?:canonical|alternate)\b", tag, re.I):
                continue  # an address naming the page, never fetched
            found.append(f"{page.relative_to(html_dir)}: {tag[:160]}>")
    for sheet in sorted(html_dir.rglob("*.css")):
        for match in _REMOTE_CSS.finditer(sheet.read_text(encoding="utf-8", errors="replace")):
            found.append(f"{sheet.relative_to(html_dir)}: {match.group(0)[:160]}")
    return found


def _edition_page(head: str, intro: str, intro_zh: str, links: str) -> str:
    """The root page and the 404 page: a plain page with one link per edition (``links``)."""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
{head}
  <style>
    body {{ font-family: Lato, "Helvetica Neue", Arial, sans-serif; margin: 4em auto; max-width: 36em; color: #404040; }}
    a {{ color: #2980b9; }}
  </style>
</head>
<body>
  <h1>ln_tutorial</h1>
  <p>{intro}</p>
  <p lang="zh-CN">{intro_zh}</p>
  <ul>
{links}
  </ul>
</body>
</html>
"""


def write_root_index(langs: list[str], html_dir: Path = HTML) -> Path:
    """A tiny page: redirect by navigator.languages, plain links for everyone else."""
    links = "\n".join(
        f'    <li><a href="{lang}/index.html" hreflang="{lang.replace("_", "-")}" '
        f'lang="{lang.replace("_", "-")}">{html.escape(LABELS.get(lang, lang))}</a></li>'
        for lang in langs
    )
    prefixes = {lang: BROWSER_PREFIXES.get(lang, [lang.split("_")[0]]) for lang in langs if lang != "en"}
    rules = "\n".join(
        f'      if ({" || ".join(f"tag.indexOf({p!r}) === 0" for p in pfx)}) return "{lang}/index.html";'
        for lang, pfx in prefixes.items()
    )
    head = f"""  <title>ln_tutorial: Layer Normalization in Triton</title>
  <script>
    // Send the reader to the edition in their browser's language (English otherwise).
    (function () {{
      function pick() {{
        var tags = navigator.languages || [navigator.language || navigator.userLanguage || "en"];
        for (var i = 0; i < tags.length; i++) {{
          var tag = String(tags[i]).toLowerCase();
          if (tag.indexOf("en") === 0) return "en/index.html";
{rules}
        }}
        return "en/index.html";
      }}
      window.location.replace(pick() + window.location.hash);
    }})();
  </script>"""
    page = _edition_page(head, "Layer Normalization in Triton: choose an edition.",
                         "用 Triton 实现层归一化：请选择语言版本。", links)
    path = Path(html_dir) / "index.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def base_url() -> str:
    """The published address from the environment, with one trailing slash ("" when unset)."""
    url = os.environ.get(BASE_URL_VARIABLE, "").strip()
    return url.rstrip("/") + "/" if url else ""


def write_not_found(langs: list[str], url: str, html_dir: Path = HTML) -> Path:
    """404.html: shown by the host at any depth, so its links are absolute paths."""
    root = urllib.parse.urlsplit(url).path if url else "/"
    links = "\n".join(
        f'    <li><a href="{html.escape(root)}{lang}/index.html" lang="{lang.replace("_", "-")}">'
        f"{html.escape(LABELS.get(lang, lang))}</a></li>"
        for lang in langs
    )
    head = """  <meta name="robots" content="noindex">
  <title>Page not found · 页面不存在 · ln_tutorial</title>"""
    page = _edition_page(head, "This page does not exist (any more). Start again from an edition:",
                         "此页面不存在（或已移动）。请从以下语言版本的首页重新开始：", links)
    path = Path(html_dir) / "404.html"
    path.write_text(page, encoding="utf-8")
    return path


def write_sitemap(langs: list[str], url: str, html_dir: Path = HTML) -> Path:
    """sitemap.xml: every page of every edition, each with its translations (hreflang)."""
    pages = {
        lang: sorted(
            p.relative_to(html_dir / lang).as_posix()
            for p in (html_dir / lang).rglob("*.html")
            if p.name not in NOT_IN_SITEMAP and not p.relative_to(html_dir / lang).parts[0].startswith("_")
        )
        for lang in langs
    }
    entries = []
    for lang in langs:
        for page in pages[lang]:
            alternates = "".join(
                f'\n    <xhtml:link rel="alternate" hreflang="{other.replace("_", "-")}" '
                f"href={quoteattr(url + other + '/' + page)}/>"
                for other in langs
                if page in pages[other]
            )
            loc = html.escape(url + lang + "/" + page)
            entries.append(f"  <url>\n    <loc>{loc}</loc>{alternates}\n  </url>")
    path = Path(html_dir) / "sitemap.xml"
    path.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:xhtml="http://www.w3.org/1999/xhtml">\n' + "\n".join(entries) + "\n</urlset>\n",
        encoding="utf-8",
    )
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep-cache", action="store_true", help="reuse executed examples and doctrees")
    parser.add_argument("--gettext", action="store_true",
                        help="write the .pot templates into docs/_build/gettext without running the examples")
    parser.add_argument("--only", choices=list(LABELS), help="build just this edition")
    parser.add_argument("--gettext-dir", type=Path, default=BUILD / "gettext",
                        help="where --gettext writes the templates (default: docs/_build/gettext)")
    args = parser.parse_args(argv)
    start = time.monotonic()

    if args.gettext:
        # -D plot_gallery=0: sphinx-gallery renders the scripts without running them.
        # -E: a fresh environment, so that templates never keep messages of an
        # older version of a page (the gettext builder is otherwise incremental).
        out = args.gettext_dir.resolve()
        sphinx("gettext", out, out / ".doctrees", "-E", "-D", "plot_gallery=0")
        # The gallery pages it wrote have no outputs: drop them, so that no later
        # --keep-cache build mistakes them for executed ones.
        for path in GALLERY_OUTPUTS[:2]:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        print(f"templates in {out}; update catalogs with:\n"
              f"  sphinx-intl update -p {out} -d {DOCS / 'locale'} -l zh_CN")
        return

    langs = [args.only] if args.only else editions()
    if not args.keep_cache:
        outputs = [BUILD / "doctrees" / lang for lang in langs] + [HTML / lang for lang in langs]
        for path in GALLERY_OUTPUTS + outputs:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()

    for lang in langs:
        t0 = time.monotonic()
        extra = [] if lang == "en" else ["-D", f"language={lang}"]
        sphinx("html", HTML / lang, BUILD / "doctrees" / lang, *extra)
        print(f"  {lang}: {time.monotonic() - t0:.0f} s", flush=True)
    built = [lang for lang in editions() if (HTML / lang / "index.html").exists()]
    index = write_root_index(built)
    url = base_url()
    write_not_found(built, url)
    stale_sitemap = HTML / "sitemap.xml"
    if url:
        print(f"  sitemap: {write_sitemap(built, url)} ({url})")
    elif stale_sitemap.exists():
        stale_sitemap.unlink()
    remote = remote_resources(HTML)
    if remote:
        sys.exit("docs/build.py: the site would fetch from other sites (it must work offline):\n  "
                 + "\n  ".join(remote))

    if not url:
        print(f"  no sitemap.xml and no canonical links: {BASE_URL_VARIABLE} (the published address) is not set")
    print(f"\nThe site is built ({time.monotonic() - start:.0f} s): {index}")
    for lang in langs:
        print(f"  {LABELS.get(lang, lang):8} {HTML / lang / 'index.html'}")
    print(f"Serve it locally with:\n  python -m http.server -d {HTML.relative_to(ROOT)}\n"
          f"and open http://127.0.0.1:8000/")


if __name__ == "__main__":
    main()
