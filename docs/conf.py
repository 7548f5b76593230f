"""Sphinx configuration of the ln_tutorial site (English source, gettext-ready).

Build it with ``python docs/build.py`` (what ``tox -e docs`` runs): it builds
every edition and writes the root page. A bare ``sphinx-build docs out`` works
too and gives the English edition.

The site must work offline: MathJax is served from ``_static/mathjax``
(sphinx-mathjax-offline), the theme ships its fonts, and no extension that
fetches anything (intersphinx, binder links, ...) is enabled.
"""

import os
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the package, also when it is not installed
sys.path.insert(0, str(DOCS / "_ext"))

# The gallery scripts run inside this process. Without a GPU they switch
# Triton to its interpreter themselves, but autodoc may import ln_tutorial
# first, and Triton reads TRITON_INTERPRET when kernels are decorated.
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:  # pragma: no cover - torch is a hard dependency
    pass

import ln_gallery  # noqa: E402  (docs/_ext)

# -- Project -----------------------------------------------------------------
project = "ln_tutorial"
author = "the ln_tutorial authors"
copyright = "2026, the ln_tutorial authors"
release = version = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # copies MathJax 3 into _static/mathjax, sets mathjax_path
    "sphinx_gallery.gen_gallery",
    "myst_parser",
    "ln_bench_results",  # docs/_ext: the recorded tables on the Benchmarks page
    "ln_i18n_downloads",  # docs/_ext: translated .py/.ipynb/.zip downloads for zh_CN
    "ln_glossary",  # docs/_ext: the Glossary page's table, from docs/glossary.yaml
    "ln_gallery",  # docs/_ext: fails the build when a core tutorial page is over its reading budget
    "ln_i18n_outputs",  # docs/_ext: gallery outputs, code comments and figure labels in the edition's language
    "ln_recorded",  # docs/_ext: the gallery pages show the outputs recorded on a GPU (docs/recorded/)
]

templates_path = ["_templates"]
html_static_path = ["_static"]
html_css_files = ["ln_tutorial.css"]
exclude_patterns = [
    "_build",
    "_generated",
    "locale",
    "recorded",  # the gallery's files of a GPU run (ln_recorded), not pages of their own
    "Thumbs.db",
    ".DS_Store",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
language = "en"
pygments_style = "sphinx"

# -- i18n ------------------------------------------------------------------------
# One catalog per document under locale/<lang>/LC_MESSAGES/, e.g.
# tutorials/01_forward.po. build.py passes -D language=zh_CN for that edition.
locale_dirs = ["locale/"]
gettext_compact = False
gettext_uuid = False
gettext_location = False  # no file:line comments: they churn on every edit

#: Editions this build links between (language switch on every page, root page).
EDITIONS = {"en": "English", "zh_CN": "简体中文"}
_built = ["en"] + [
    lang for lang in EDITIONS if lang != "en" and any((DOCS / "locale" / lang / "LC_MESSAGES").rglob("*.po"))
]

# -- HTML --------------------------------------------------------------------
html_theme = "sphinx_rtd_theme"
html_title = "ln_tutorial documentation"
html_theme_options = {
    "navigation_depth": 3,
    "collapse_navigation": False,
    "style_external_links": False,
    "prev_next_buttons_location": "both",
}
html_context = {
    "ln_editions": [(lang, EDITIONS[lang]) for lang in _built],
}
# Search: Sphinx's Chinese index (language zh_CN) splits text into words with
# jieba (a dependency of the docs extra). This user dictionary teaches it the
# terms of the glossary, so that 层归一化, 反向传播, 向量-雅可比积 ... are words
# of the index (and their parts, such as 归一化, too).
html_search_options = {"dict": str(DOCS / "locale" / "zh_CN" / "search_words.txt")}
html_show_sourcelink = True
html_copy_source = True

# -- Hosting ---------------------------------------------------------------------
# Published at $LN_TUTORIAL_BASE_URL (the Pages workflow sets it), each edition
# under <base>/<lang>/: _edition_settings sets html_baseurl from it, and Sphinx
# writes every page's <link rel="canonical">. build.py writes the sitemap.
BASE_URL = os.environ.get("LN_TUTORIAL_BASE_URL", "").strip().rstrip("/")


def _repository_url() -> str:
    """The address to clone the repository from: $LN_TUTORIAL_REPOSITORY_URL (the Pages
    workflows set it from github.server_url and github.repository), else the checkout's
    "origin" remote (https, without credentials), else the checkout's own folder."""
    import re

    url = os.environ.get("LN_TUTORIAL_REPOSITORY_URL", "").strip()
    if not url:
        try:
            url = subprocess.run(["git", "remote", "get-url", "origin"], cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):  # not a git checkout, or no origin
            return str(ROOT)
    url = re.sub(r"^(https?://)[^/@]*@", r"\1", url)
    scp = re.fullmatch(r"[\w.-]+@([\w.-]+):(?!//)(.+)", url)  # git@github.com:owner/name.git
    return (f"https://{scp.group(1)}/{scp.group(2)}" if scp else url).rstrip("/")


# The clone line of the installation and index pages: {{ repository_url }} in
# Markdown (a parsed-literal block), |repository_url| in reST.
REPOSITORY_URL = _repository_url()
myst_substitutions = {"repository_url": REPOSITORY_URL}
rst_prolog = f".. |repository_url| replace:: {REPOSITORY_URL}\n"


def _commit() -> str:
    """The commit this site is built from ("-dirty": with uncommitted changes), or ""."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        return ""


COMMIT = _commit()
# Page-frame text of each edition (docs/_templates/): the footer's version and
# commit, and the note under the download buttons of the tutorial pages.
FRAME_TEXT = {
    "en": {
        "ln_build": f"ln_tutorial {release}" + (f", built from commit {COMMIT}." if COMMIT else "."),
        "ln_downloads_note": "The downloads need PyTorch, Triton and this package with its examples extra "
                             '(in a checkout: <code>pip install -e ".[examples]"</code>), see '
                             '<a href="{href}">Installation</a>.',
    },
    "zh": {
        "ln_build": f"ln_tutorial {release}" + (f"，构建自提交 {COMMIT}。" if COMMIT else "。"),
        "ln_downloads_note": "下载的脚本和笔记本需要 PyTorch、Triton 以及本包和它的 examples 附加依赖"
                             '（在源代码仓库中：<code>pip install -e ".[examples]"</code>），见'
                             '<a href="{href}">安装</a>。',
    },
}
html_context.update(FRAME_TEXT["en"])

# -- autodoc -----------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_inherit_docstrings = False  # not torch.nn.Module's docstrings on LayerNorm
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# -- MyST --------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist", "substitution"]  # substitution: repository_url
myst_heading_anchors = 3

# -- sphinx-gallery -------------------------------------------------------------
# examples/ holds the scripts as written; ln_gallery copies them into
# _generated/examples/ with each "# ln_tutorial:source <object>" marker replaced
# by that object's current source (see docs/_ext/ln_gallery.py). sphinx-gallery
# renders, runs and offers for download the generated copies.
GENERATED_EXAMPLES = DOCS / "_generated" / "examples"
ln_gallery.expand_examples(ROOT / "examples", GENERATED_EXAMPLES)

sphinx_gallery_conf = {
    "examples_dirs": str(GENERATED_EXAMPLES.relative_to(DOCS)),
    "gallery_dirs": "tutorials",
    "filename_pattern": r"/\d\d_",  # run 01_forward.py etc. (default runs only plot_*)
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": True,
    # Never print "Total running time": it changes on every run and would turn
    # the translated catalogs fuzzy. No execution-times page either.
    "min_reported_time": 10**9,
    "write_computation_times": False,
    "show_memory": False,
    "remove_config_comments": True,
    "abort_on_example_error": False,
    "only_warn_on_example_error": False,  # a failing example fails the build
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "capture_repr": (),
    "reference_url": {},
    "backreferences_dir": None,
    "plot_gallery": "True",
}

# Warnings that are not ours to fix: none so far. Keep this list empty unless a
# dependency forces it, and say why.
suppress_warnings = []


# -- Per-edition settings --------------------------------------------------------
def _edition_settings(app, config):
    """Settings that depend on the edition's language (given by -D language=...)."""
    if str(config.language).startswith("zh"):
        # Work around Sphinx 9.0's broken Chinese search page (see the file).
        config.html_js_files = list(config.html_js_files) + ["ln_search_zh.js"]
        # Text of the page frame that no catalog of ours reaches.
        config.html_title = "ln_tutorial 文档"
        config.copyright = "2026，ln_tutorial 作者"
        config.html_context.update(FRAME_TEXT["zh"])
    if BASE_URL:
        config.html_baseurl = f"{BASE_URL}/{config.language}/"


def setup(app):
    app.connect("config-inited", _edition_settings)
