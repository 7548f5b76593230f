"""The Chinese edition's code: printed strings, figure labels and comments translated token by token.

Catalogs: docs/locale/<lang>/code/<script>.po, one per example and one for the
standalone script (``layer_norm_triton``, made from ln_tutorial_book/plain.py); see
docs/_ext/ln_gallery.py. The page catalogs translate the prose; these, the code.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

read_po = pytest.importorskip("babel.messages.pofile").read_po  # the docs extra

from helpers import load_module
from test_terms import english_words  # the glossary's allow-list of English words

ROOT = Path(__file__).resolve().parents[1]
LOCALE = ROOT / "docs" / "locale"
LANGS = sorted(p.parent.name for p in LOCALE.glob("*/code"))
ln_gallery = load_module("ln_gallery", ROOT / "docs" / "_ext" / "ln_gallery.py")
SCRIPTS = {p.stem: (p, True) for p in sorted((ROOT / "examples").glob("[0-9][0-9]_*.py"))}
SCRIPTS["layer_norm_triton"] = (ROOT / "ln_tutorial_book" / "plain.py", False)
CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")  # Chinese characters and punctuation
# Tokens whose translation is code, not Chinese text: a separator line, the font list.
NOT_PROSE = {"# " + "-" * 75, '"DejaVu Sans"'}
FIELDS = re.compile(r"\{[^{}]*\}")


def _catalog(lang, name):
    path = LOCALE / lang / "code" / f"{name}.po"
    assert path.exists(), f"no code catalog {path}"
    with path.open("rb") as f:
        return read_po(f)


def test_there_are_code_catalogs():
    assert "zh_CN" in LANGS


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_code_catalog_is_complete_current_and_chinese(lang, name):
    path, gallery = SCRIPTS[name]
    source = path.read_text(encoding="utf-8")
    tokens = {t.string for t in ln_gallery._code_tokens(source, gallery)}
    catalog = {m.id: m for m in _catalog(lang, name) if m.id}
    missing = [m for m in ln_gallery.code_messages(source, gallery) if m not in catalog]
    assert not missing, f"{name}: code strings or comments without a translation: {missing}"
    stale = [m for m in catalog if m not in tokens]
    assert not stale, f"{name}: catalog entries no longer in the code: {stale}"
    for msgid, message in catalog.items():
        assert message.string and not message.fuzzy, f"{name}: untranslated or fuzzy: {msgid!r}"
        assert msgid in NOT_PROSE or CJK.search(message.string), f"{name}: not Chinese: {message.string!r}"
        if msgid.startswith(("f'", 'f"')):
            assert sorted(FIELDS.findall(msgid)) == sorted(FIELDS.findall(message.string)), (
                f"{name}: the translation of {msgid!r} changes its fields")


def _identifiers(source: str) -> set[str]:
    """The names a script uses: a comment may name them in English (``row``, ``stride``, ``forward``)."""
    import io
    import keyword
    import tokenize

    return {t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type == tokenize.NAME and not keyword.iskeyword(t.string)}


def english_prose(msgid: str, msgstr: str, identifiers: set[str]) -> list[str]:
    """English words left in the Chinese of a comment or a string, beyond identifiers and the glossary's allow-list."""
    if msgid in NOT_PROSE:
        return []
    text = re.sub(r"^[rbuRBUfF]*(\"\"\"|'\'\'|\"|')|(\"\"\"|'\'\'|\"|')$", "", msgstr.strip())  # the quotes
    return english_words(text, identifiers)


@pytest.mark.parametrize("lang", [lang for lang in LANGS if lang.startswith("zh")])
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_code_translations_leave_no_english_prose(lang, name):
    """A translated comment, docstring or printed string is Chinese but for identifiers and allowed names."""
    identifiers = _identifiers(SCRIPTS[name][0].read_text(encoding="utf-8"))
    found = [f"{m.id!r}\n    -> {m.string!r}: {words}" for m in _catalog(lang, name)
             if m.id and (words := english_prose(m.id, m.string, identifiers))]
    assert not found, f"{name}: English left in translated code ({len(found)}):\n" + "\n".join(found)


@pytest.mark.parametrize("msgid, msgstr", [
    ("# centred first: no cancellation in the variance", "# 先中心化：the variance 中没有相消"),
    ('"forward and backward match torch"', '"前向和反向 match torch"'),
    ('"""Two programs per SM, enough to fill the GPU."""', '"""每个 SM 两个程序，enough to fill the GPU。"""'),
])
def test_the_english_prose_check_sees_planted_english(msgid, msgstr):
    identifiers = _identifiers(SCRIPTS["layer_norm_triton"][0].read_text(encoding="utf-8"))
    assert english_prose(msgid, msgstr, identifiers), f"missed the English in {msgstr!r}"


@pytest.mark.parametrize("lang", [lang for lang in LANGS if lang.startswith("zh")])
def test_the_english_prose_check_catches_english_planted_in_a_real_comment(lang):
    """A real translated comment of the catalog passes; the same comment with English words added fails."""
    identifiers = _identifiers(SCRIPTS["layer_norm_triton"][0].read_text(encoding="utf-8"))
    comments = [m for m in _catalog(lang, "layer_norm_triton") if m.id.startswith("#") and CJK.search(m.string)]
    assert comments
    for m in comments:
        assert not english_prose(m.id, m.string, identifiers), m.string
        assert english_prose(m.id, m.string + " for each row of the tile", identifiers), m.string


@pytest.mark.parametrize("lang", LANGS)
def test_translated_examples_compile_and_keep_the_package_source(lang, tmp_path):
    english = {p.name: p.read_text(encoding="utf-8")
               for p in ln_gallery.expand_examples(ROOT / "examples", tmp_path / "en") if p.suffix == ".py"}
    for path in ln_gallery.expand_examples(ROOT / "examples", tmp_path / lang, LOCALE / lang / "code"):
        if path.suffix != ".py":
            continue
        text = path.read_text(encoding="utf-8")
        compile(text, path.name, "exec")
        assert text != english[path.name], f"{path.name}: nothing translated"
        for target in ln_gallery.MARKER.findall((ROOT / "examples" / path.name).read_text(encoding="utf-8")):
            assert ln_gallery.object_source(target[1])[0] in text, f"{path.name}: {target[1]} changed"


@pytest.mark.parametrize("lang", LANGS)
def test_the_translated_standalone_script_runs_on_its_own(lang, tmp_path):
    pytest.importorskip("matplotlib")
    downloads = load_module("ln_i18n_downloads", ROOT / "docs" / "_ext" / "ln_i18n_downloads.py")
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))  # it imports ln_gallery
    try:
        script = tmp_path / "layer_norm_triton.py"
        script.write_bytes(downloads.standalone_script(ROOT / "docs", lang))
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    assert CJK.search(script.read_text(encoding="utf-8"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MPLBACKEND"] = "Agg"
    result = subprocess.run([sys.executable, "-I", script.name], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert CJK.search(result.stdout), "the script printed no Chinese"
    assert (tmp_path / "layer_norm_triton.png").stat().st_size > 0


@pytest.mark.parametrize("lang", [p.parent.name for p in LOCALE.glob("*/LC_MESSAGES")])
@pytest.mark.parametrize("name", ["04_forward_advanced", "05_backward_advanced"])
def test_advanced_page_downloads_translate_completely(lang, name):
    """As tests/test_i18n.py checks for the core pages: every message of the page's catalog reaches its script."""
    downloads = load_module("ln_i18n_downloads", ROOT / "docs" / "_ext" / "ln_i18n_downloads.py")
    script = ln_gallery.expand_text((ROOT / "examples" / f"{name}.py").read_text(encoding="utf-8"))
    catalog = downloads.load_catalog(LOCALE / lang / "LC_MESSAGES" / "tutorials" / f"{name}.po")
    translated, found = downloads.translate_script(script, catalog)
    missing = [m for m in catalog if m not in found and not downloads._PAGE_ONLY.match(m)]
    assert not missing, f"{name}.py ({lang}): messages not found in the script's text: {missing}"
    for block in downloads._split(translated)[1]:
        if block.type == "text":
            assert CJK.search(block.content), f"an untranslated text block in {name}.py: {block.content[:200]!r}"
    compile(translated, f"{name}.py", "exec")
