"""Build the ln_tutorial site: every edition, and the root page that picks one.

    python docs/build.py              # what ``tox -e docs`` runs
    python docs/build.py --keep-cache # reuse examples already executed
    python docs/build.py --gettext    # only the message templates (no example runs)
    python docs/build.py --record     # on a GPU: only run the examples and record their outputs
                                      # (docs/recorded/README.md: --gpu-bundle, --archive, --unpack)

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

The gallery pages show the outputs of a GPU run (``docs/_ext/ln_recorded.py``,
``docs/recorded/README.md``). On a GPU the examples' outputs are recorded into
``docs/recorded/`` as they run (commit them). Without a GPU the examples still
run, through Triton's interpreter, as a check, and the pages show the recorded
outputs instead; an example changed since its recording fails the build, which
names it, unless ``LN_TUTORIAL_ALLOW_STALE_OUTPUTS=1`` (its page then shows
and names this build's own outputs). ``--record`` runs the examples and records
them without building the site: all it needs is the GPU, Sphinx and
sphinx-gallery (the dummy builder: no theme, no search index).
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


def _ln_recorded():
    """docs/_ext/ln_recorded.py, imported from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ln_recorded", DOCS / "_ext" / "ln_recorded.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(only: str | None, simulate: bool = False, examples: str | None = None,
           archive: Path | None = None) -> None:
    """Run the gallery (the dummy builder: no site) of every edition; ln_recorded records the outputs.

    ``archive``: a .tar.gz of the record folders this run wrote (to carry them off the GPU machine).
    """
    import torch

    recorded = _ln_recorded()
    if not torch.cuda.is_available() and not simulate:
        sys.exit("docs/build.py --record: no CUDA GPU here, and the record holds a GPU's outputs. "
                 "(--simulate records this CPU run instead, marked as a simulation: to try the flow, never to commit.)")
    # Examples not run here (--examples) keep their record, current or not.
    os.environ[recorded.ALLOW_STALE_VARIABLE] = "1"
    if simulate:
        os.environ[recorded.SIMULATION_VARIABLE] = "1"
    for path in GALLERY_OUTPUTS:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    before = recorded.record_stamps(DOCS)
    for lang in [only] if only else editions():
        out = BUILD / "record" / lang
        if out.exists():
            shutil.rmtree(out)
        extra = [] if lang == "en" else ["-D", f"language={lang}"]
        if examples:
            extra += ["-D", f"sphinx_gallery_conf.filename_pattern=/(?:{examples})"]
        t0 = time.monotonic()
        sphinx("dummy", out, out / ".doctrees", *extra)
        print(f"  {lang}: {time.monotonic() - t0:.0f} s", flush=True)
    print("\n".join(recorded.record_status(DOCS)))
    written = sorted(name for name, stamp in recorded.record_stamps(DOCS).items() if before.get(name) != stamp)
    if archive:
        recorded.archive_records(DOCS, written, Path(archive))
        print(f"  {', '.join(written) or 'nothing'} recorded, archived in {archive} "
              f"({Path(archive).stat().st_size / 2**20:.2f} MiB)")


#: What ``--record`` needs on a GPU machine that has torch, triton, numpy, matplotlib, pandas,
#: pillow, pyyaml, jinja2 and pygments but no Sphinx: the packages of the dummy builder's build
#: (no theme, no search index), with every requirement of theirs that is not in that list.
GPU_BUNDLE = ["sphinx", "sphinx-gallery", "myst-parser", "sphinx-mathjax-offline", "babel", "docutils",
              "snowballstemmer", "alabaster", "imagesize", "requests", "charset-normalizer", "idna", "urllib3",
              "certifi", "roman-numerals", "packaging", "sphinxcontrib-applehelp", "sphinxcontrib-devhelp",
              "sphinxcontrib-htmlhelp", "sphinxcontrib-jsmath", "sphinxcontrib-qthelp",
              "sphinxcontrib-serializinghtml", "markdown-it-py", "mdit-py-plugins", "mdurl"]  # fmt: skip
GPU_HAS = ["torch", "triton", "numpy", "matplotlib", "pandas", "pillow", "pyyaml", "jinja2", "markupsafe", "pygments"]
#: The Chinese figures' font: the Simplified Chinese face of Debian's fonts-noto-cjk.
CJK_COLLECTION = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")
CJK_FACE = "Noto Sans CJK SC"


def cjk_characters() -> str:
    """The characters the Chinese figures may need: GB 2312's, and every one of the zh_CN catalogs."""
    chars = set()
    for first in range(0xA1, 0xF8):
        for second in range(0xA1, 0xFF):
            try:
                chars.add(bytes([first, second]).decode("gb2312"))
            except UnicodeDecodeError:
                pass
    for po in sorted((DOCS / "locale" / "zh_CN").rglob("*.po")):
        chars.update(c for c in po.read_text(encoding="utf-8") if ord(c) > 0x7F)
    return "".join(sorted(chars))


def gpu_bundle(dest: Path) -> None:
    """Write into ``dest`` what ``--record`` needs on the GPU machine: wheels, a CJK font, the commit."""
    from importlib.metadata import version

    dest = Path(dest)
    wheels, fonts = dest / "docs", dest / "fonts"
    wheels.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={version(name)}" for name in GPU_BUNDLE]
    for old in wheels.glob("*.whl"):  # one version of each: two stop the whole install there
        if not any(old.name.lower().startswith(f"{p.split('==')[0].replace('-', '_').lower()}-{p.split('==')[1]}-")
                   for p in pins):
            old.unlink()
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                    "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                    "--platform", "manylinux1_x86_64", "-d", str(wheels), *pins], check=True)  # fmt: skip
    if not CJK_COLLECTION.is_file():
        sys.exit(f"docs/build.py --gpu-bundle: no {CJK_COLLECTION} (Debian: apt-get install fonts-noto-cjk)")
    from fontTools import subset
    from fontTools.ttLib import TTCollection

    faces = [f["name"].getDebugName(1) for f in TTCollection(str(CJK_COLLECTION)).fonts]
    fonts.mkdir(parents=True, exist_ok=True)
    font = fonts / "NotoSansCJKsc-Regular.otf"
    options = subset.Options(font_number=faces.index(CJK_FACE), name_IDs=["*"], name_languages=["*"],
                             layout_features=["*"], notdef_outline=True)
    face = subset.load_font(str(CJK_COLLECTION), options)
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=cjk_characters() + "".join(map(chr, range(0x20, 0x7F))))
    subsetter.subset(face)
    subset.save_font(face, str(font), options)
    commit = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.strip()
    (dest / "commit").write_text(commit + "\n", encoding="utf-8")
    carry = [wheels, fonts, dest / "commit"]
    size = sum(p.stat().st_size for c in carry for p in [c, *c.rglob("*")] if p.is_file())
    print(f"{len(list(wheels.glob('*.whl')))} wheels, {font.name}, commit {commit}: {size / 2**20:.1f} MiB "
          f"to carry in {', '.join(str(c) for c in carry)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep-cache", action="store_true", help="reuse executed examples and doctrees")
    parser.add_argument("--gettext", action="store_true",
                        help="write the .pot templates into docs/_build/gettext without running the examples")
    parser.add_argument("--only", choices=list(LABELS), help="build just this edition")
    parser.add_argument("--gettext-dir", type=Path, default=BUILD / "gettext",
                        help="where --gettext writes the templates (default: docs/_build/gettext)")
    parser.add_argument("--record", action="store_true",
                        help="run the examples on this machine's GPU and record their outputs in "
                             "docs/recorded/, without building the site")
    parser.add_argument("--simulate", action="store_true",
                        help="with --record on a machine without a GPU: record the CPU run, marked as a "
                             "simulation (to try the flow; never commit it)")
    parser.add_argument("--examples", metavar="REGEX",
                        help="with --record: run and record only the examples whose file name starts with a "
                             "match (e.g. 03_), the others keep their record")
    parser.add_argument("--archive", type=Path, metavar="FILE.tar.gz",
                        help="with --record: also pack the record folders it wrote into this file")
    parser.add_argument("--gpu-bundle", type=Path, metavar="DIR",
                        help="write into DIR (e.g. .whl) the wheels, the CJK font and the commit that --record "
                             "needs on a GPU machine without Sphinx or a network (docs/recorded/README.md)")
    parser.add_argument("--unpack", type=Path, metavar="FILE.tar.gz",
                        help="replace the record folders held by an archive of --record --archive with its own")
    args = parser.parse_args(argv)
    start = time.monotonic()
    if args.record:
        record(args.only, args.simulate, args.examples, args.archive)
        return
    if args.simulate or args.examples or args.archive:
        parser.error("--simulate, --examples and --archive go with --record")
    if args.gpu_bundle:
        gpu_bundle(args.gpu_bundle)
        return
    if args.unpack:
        recorded = _ln_recorded()
        print(f"replaced {', '.join(recorded.unpack_records(DOCS, args.unpack))} from {args.unpack}")
        print("\n".join(recorded.record_status(DOCS)))
        return

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
