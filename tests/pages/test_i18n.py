"""The translations of the site: complete, not fuzzy, and current.

* Every catalog in ``docs/locale/<lang>/LC_MESSAGES/`` is 100% translated, with
  no fuzzy entry, and keeps the code, math, roles and links of its messages.
* The catalogs are not stale: the message templates are regenerated from the
  current sources (``docs/build.py --gettext``, examples not executed, in a
  copy of the docs so that nothing in the working tree is touched) and their
  msgids must be exactly those of the catalogs. After editing a page or an
  example, update the catalogs with::

      python docs/build.py --gettext
      sphinx-intl update -p docs/_build/gettext -d docs/locale -l zh_CN

  then translate what became new or fuzzy.
* The benchmark directive's own catalog has every string the directive writes.
* The Chinese downloads: the example scripts' text blocks translate completely
  through the page catalogs, and their code is unchanged.

CPU only, no GPU; the template build takes a few seconds. Skipped without
Sphinx (the ``docs`` extra).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import load_module

pytest.importorskip("sphinx")
pytest.importorskip("sphinx_gallery")
pytest.importorskip("babel")

from babel.messages.pofile import read_po  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LOCALE = DOCS / "locale"
LANGS = sorted(p.name for p in LOCALE.iterdir() if (p / "LC_MESSAGES").is_dir()) if LOCALE.is_dir() else []
CJK = re.compile(r"[\u3400-\u9fff]")


def _catalogs(lang):
    base = LOCALE / lang / "LC_MESSAGES"
    return {str(p.relative_to(base).with_suffix("")).replace(os.sep, "/"): p for p in sorted(base.rglob("*.po"))}


def _read(path):
    with open(path, "rb") as f:
        return read_po(f)


def test_there_is_a_chinese_edition():
    assert "zh_CN" in LANGS
    docs = set(_catalogs("zh_CN"))
    for doc in ("index", "installation", "api", "benchmarks", "performance", "glossary",
                "tutorials/index", "tutorials/01_forward", "tutorials/02_backward", "tutorials/03_benchmark"):
        assert doc in docs, f"no catalog for {doc}"


@pytest.mark.parametrize("lang", LANGS)
def test_catalogs_are_fully_translated_and_not_fuzzy(lang):
    problems = []
    for doc, path in _catalogs(lang).items():
        catalog = _read(path)
        if catalog.fuzzy:
            problems.append(f"{doc}: the catalog header is marked fuzzy")
        for message in catalog:
            if not message.id:
                continue
            if message.fuzzy:
                problems.append(f"{doc}: fuzzy: {message.id[:70]!r}")
            elif not message.string:
                problems.append(f"{doc}: untranslated: {message.id[:70]!r}")
        for message in catalog.obsolete.values():
            problems.append(f"{doc}: obsolete entry left in the catalog: {message.id[:70]!r}")
    assert not problems, "\n".join(problems)


# Inline pieces a translation must carry over unchanged: reST literals, math and
# role targets, MyST code spans, roles and math, link targets. Link and role
# texts may be translated, their targets not; the order may change.
def _kept(text):
    found = []

    def take(pattern, piece=lambda m: m.group(0)):
        nonlocal text
        found.extend(piece(m) for m in re.finditer(pattern, text))
        text = re.sub(pattern, " ", text)

    def target(m):
        inner = m.group(2)
        link = re.search(r"<([^>]+)>$", inner)
        return f"{m.group(1)}:{link.group(1) if link else inner}"

    take(r"``.+?``")
    take(r":math:`[^`]+`")
    take(r":([\w:]+):`([^`]*)`", target)  # reST roles
    take(r"\{(\w+)\}`([^`]*)`", target)  # MyST roles
    take(r"`[^`]*<([^>]+)>`__?", lambda m: m.group(1))  # reST links
    take(r"`[^`]+`")  # MyST code
    take(r"\$[^$]+\$")  # MyST math
    take(r"\]\(([^)]+)\)", lambda m: m.group(1))  # MyST links
    return sorted(found)


@pytest.mark.parametrize("lang", LANGS)
def test_translations_keep_code_math_and_links(lang):
    problems = []
    for doc, path in _catalogs(lang).items():
        for message in _read(path):
            if not message.id or not message.string:
                continue
            if _kept(message.id) != _kept(message.string):
                problems.append(f"{doc}: {message.id[:60]!r}\n   source keeps {_kept(message.id)}\n"
                                f"   translation {_kept(message.string)}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("lang", [lang for lang in LANGS if lang.startswith("zh")])
def test_prose_is_chinese(lang):
    """A message with English words in it is translated into Chinese unless it is a name, code or math."""
    suspicious = []
    for doc, path in _catalogs(lang).items():
        for message in _read(path):
            if not message.id or message.string != message.id:
                continue
            words = re.sub(r"``.*?``|`[^`]*`|:\w+:`[^`]*`|\$[^$]*\$|\\[a-zA-Z]+|\{[^}]*\}", "", message.id)
            if len(re.findall(r"\b[a-z]{3,}\b", words)) >= 3:
                suspicious.append(f"{doc}: {message.id[:70]!r}")
    assert not suspicious, "English prose kept as its own translation:\n" + "\n".join(suspicious)


@pytest.fixture(scope="module")
def fresh_templates(tmp_path_factory):
    """The .pot templates of the current sources, built in a copy of docs/ (examples not run)."""
    work = tmp_path_factory.mktemp("i18n")
    ignore = shutil.ignore_patterns("_build", "_generated", "tutorials", "sg_execution_times.rst", "__pycache__",
                                    "*.mo")
    shutil.copytree(DOCS, work / "docs", ignore=ignore)
    shutil.copytree(ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "ln_tutorial").symlink_to(ROOT / "ln_tutorial", target_is_directory=True)
    out = work / "pot"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(work), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, str(work / "docs" / "build.py"), "--gettext", "--gettext-dir", str(out)],
                            cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"the gettext build failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return {str(p.relative_to(out).with_suffix("")).replace(os.sep, "/"): p
            for p in sorted(out.rglob("*.pot")) if ".doctrees" not in p.parts}


@pytest.mark.parametrize("lang", LANGS)
def test_catalogs_are_current(fresh_templates, lang):
    catalogs = _catalogs(lang)
    assert set(fresh_templates) == set(catalogs), (
        f"documents without a catalog: {sorted(set(fresh_templates) - set(catalogs))}; "
        f"catalogs without a document: {sorted(set(catalogs) - set(fresh_templates))}"
    )
    problems = []
    for doc, pot in fresh_templates.items():
        wanted = {m.id for m in _read(pot) if m.id}
        have = {m.id for m in _read(catalogs[doc]) if m.id}
        for msgid in sorted(wanted - have):
            problems.append(f"{doc}: new or changed in the source, not in the catalog: {msgid[:80]!r}")
        for msgid in sorted(have - wanted):
            problems.append(f"{doc}: in the catalog, no longer in the source: {msgid[:80]!r}")
    assert not problems, ("the catalogs are stale (see this module's docstring to update them):\n"
                          + "\n".join(problems))


def test_benchmark_directive_catalog_is_complete():
    ext = DOCS / "_ext" / "ln_bench_results.py"
    wanted = {
        node.args[0].value
        for node in ast.walk(ast.parse(ext.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_"
        and node.args and isinstance(node.args[0], ast.Constant)
    }
    assert wanted
    for lang in LANGS:
        po = DOCS / "_ext" / "locale" / lang / "LC_MESSAGES" / "ln_bench_results.po"
        assert po.exists(), f"no catalog for the benchmark directive in {lang}"
        catalog = {m.id: m for m in _read(po) if m.id}
        assert set(catalog) == wanted, (f"{po}: missing {sorted(wanted - set(catalog))}, "
                                        f"unused {sorted(set(catalog) - wanted)}")
        for message in catalog.values():
            assert message.string and not message.fuzzy, f"{po}: untranslated or fuzzy: {message.id!r}"
            fields = lambda s: sorted(re.findall(r"\{[^}]*\}", s))  # noqa: E731
            assert fields(message.id) == fields(message.string), f"{po}: fields differ in {message.id!r}"


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", ["01_forward", "02_backward", "03_benchmark"])
def test_downloads_translate_completely_with_code_unchanged(tmp_path, lang, name):
    ln_gallery = load_module("ln_gallery", DOCS / "_ext" / "ln_gallery.py")
    downloads = load_module("ln_i18n_downloads", DOCS / "_ext" / "ln_i18n_downloads.py")
    script = ln_gallery.expand_text((ROOT / "examples" / f"{name}.py").read_text(encoding="utf-8"))
    catalog = downloads.load_catalog(LOCALE / lang / "LC_MESSAGES" / "tutorials" / f"{name}.po")
    translated, found = downloads.translate_script(script, catalog)
    missing = [m for m in catalog if m not in found and not downloads._PAGE_ONLY.match(m)]
    assert not missing, f"{name}.py ({lang}): messages not found in the script's text: {missing}"
    _, english_blocks = downloads._split(script)
    _, translated_blocks = downloads._split(translated)
    assert [b.content for b in english_blocks if b.type == "code"] == \
        [b.content for b in translated_blocks if b.type == "code"]
    assert [b.type for b in english_blocks] == [b.type for b in translated_blocks]
    if lang.startswith("zh"):
        for block in translated_blocks:
            if block.type == "text":
                assert CJK.search(block.content), f"an untranslated text block in {name}.py: {block.content[:200]!r}"
    compile(translated, f"{name}.py", "exec")


def test_translated_titles_get_underlines_of_their_width():
    downloads = load_module("ln_i18n_downloads", DOCS / "_ext" / "ln_i18n_downloads.py")
    catalog = {"Setting up": "准备工作", "The code runs here.": "代码在这里运行。"}
    found = set()
    text = downloads.translate_rst("Setting up\n----------\n\nThe code\nruns here.\n", catalog, found)
    assert text == "准备工作\n--------\n\n代码在这里运行。\n"
    assert found == set(catalog)
    # a list item wrapped over two indented lines becomes one translated line after its bullet
    text = downloads.translate_rst("* The code\n  runs here.\n", catalog, set())
    assert text == "* 代码在这里运行。\n"
