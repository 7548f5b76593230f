"""The Chinese edition speaks with one voice: the terms of ``docs/glossary.yaml``.

``docs/glossary.yaml`` is the one source of each term's Chinese rendering (the
Glossary page is built from it). Every Chinese catalog, the pages'
(``docs/locale/zh_CN/LC_MESSAGES/**/*.po``) and the docs extensions'
(``docs/_ext/locale/zh_CN/LC_MESSAGES/*.po``), is checked for

* a banned rendering (线程束 for warp, 启动函数 for launcher, ...);
* an English term left in a Chinese sentence where the glossary gives a
  Chinese one (terms kept in English, such as warp, are allowed; so is an
  English gloss in brackets right after a Chinese word);
* inline markup that the translation broke: reST needs a space or a suitable
  punctuation mark around ````literal````, ``:role:`x```, ``*emphasis*``
  (``程序 ``2r + k``（`` stays raw on the page);
* a calque (``calques`` in the glossary: 机制 for "machinery", 在途 for "in
  flight", 扫描 for "the sweep");
* a term written another way: where the English says a glossary term, the
  Chinese says it with the glossary's rendering (or its abbreviation), not
  with a synonym of the translator's choosing;
* punctuation: ``100%`` (never ``100 %``), full-width ``：；，？！`` after
  Chinese text and ``（）`` around it, a space between Chinese and Latin
  letters or digits.

The code catalogs (``docs/locale/zh_CN/code/*.po``: comments and printed
strings of the examples) are checked for calques and renderings too.

Code, roles, math and link targets are removed before the prose is checked.
And every term a page defines (in italics) or sets in bold within a sentence
is in the glossary, in both languages.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
pytest.importorskip("babel")

from babel.messages.pofile import read_po  # noqa: E402
from docutils.utils import punctuation_chars  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GLOSSARY = yaml.safe_load((DOCS / "glossary.yaml").read_text(encoding="utf-8"))
TERMS = GLOSSARY["terms"]
CATALOG_DIRS = [DOCS / "locale" / "zh_CN" / "LC_MESSAGES", DOCS / "_ext" / "locale" / "zh_CN" / "LC_MESSAGES"]
CODE_CATALOGS = DOCS / "locale" / "zh_CN" / "code"
CALQUES = GLOSSARY.get("calques", [])
# English words a Chinese text may keep besides identifiers: the terms kept in English, their
# abbreviations, and the glossary's names.
ALLOWED_ENGLISH = {w.lower() for t in TERMS for w in ([t["zh"]] if t.get("keep_english") else []) + t.get("abbr", [])} \
    | {n.lower() for n in GLOSSARY.get("names", [])}
CJK = re.compile(r"[\u3400-\u9fff]")

# Italic or bold words that emphasise, not define: keep this list short.
EMPHASIS_ONLY = {
    "every", "before",
    "the host",  # a section's title, named in italics
    "pages", "github actions",  # labels of GitHub's settings page
    "the forward at full speed", "the backward at full speed",  # the advanced pages' names on the gallery index
    "takes", "gains", "else",  # the headings of each variant module's docstring (API page)
}


def _catalogs():
    for base in CATALOG_DIRS:
        for path in sorted(base.rglob("*.po")):
            yield path.relative_to(ROOT).as_posix(), path


def _messages():
    """(catalog, msgid, msgstr) of every translated message of every zh_CN catalog."""
    for name, path in _catalogs():
        with open(path, "rb") as f:
            for message in read_po(f):
                if message.id and message.string:
                    yield name, message.id, message.string


MESSAGES = list(_messages())


def _code_messages():
    """(catalog, msgid, msgstr) of the code catalogs: comments and strings of the examples."""
    for path in sorted(CODE_CATALOGS.glob("*.po")):
        with open(path, "rb") as f:
            for message in read_po(f):
                if message.id and message.string:
                    yield path.relative_to(ROOT).as_posix(), message.id, message.string


CODE_MESSAGES = list(_code_messages())

# Catalogs that predate a rule and are retranslated as their sources are rewritten: the rule
# skips them, and test_pending_catalogs_still_need_work fails once one passes it, so that the
# exemption leaves with the last problem.
PENDING: dict[tuple[str, str], str] = {}


def _real(rule: str) -> list:
    """The messages ``rule`` checks: every catalog's, less the pending ones."""
    return [m for m in MESSAGES + CODE_MESSAGES if (m[0], rule) not in PENDING]

# What is not prose: code, roles, math, links and their targets, URLs, paths.
_NOT_PROSE = [
    r"``.+?``",
    r":[\w:.-]+:`[^`]*`",  # reST roles, :math: included
    r"\{[\w:.-]+\}`[^`]*`",  # MyST roles
    r"`[^`]*`_{0,2}",  # MyST code, reST links and interpreted text
    r"\$\$.+?\$\$",
    r"\$[^$]+\$",
    r"\]\([^)]*\)",  # MyST link targets
    r"https?://\S+",
    r"\b[\w.-]+/[\w./-]+",  # paths such as docs/glossary.yaml
    r"\\[a-zA-Z]+",  # TeX commands (a math block's msgstr)
    r"“[^”]*”|\"[^\"]*\"",  # quoted titles and messages: "Layer Normalization", arXiv
]


def prose(text: str) -> str:
    for pattern in _NOT_PROSE:
        text = re.sub(pattern, " ", text, flags=re.S)
    return text


def _word(form: str) -> re.Pattern:
    """``form`` as whole words (a plural too): not inside Liger-Kernel, launch_config or x.mean."""
    return re.compile(r"(?<![\w.-])" + re.escape(form) + r"(?:e?s)?(?![\w-])", re.I)


def _where(name, msgid, msgstr, hit=""):
    """Where a problem is: the catalog, the msgid's start, and the msgstr around ``hit``."""
    at = max(0, msgstr.find(hit) - 60) if hit else 0
    return f"{name}\n    msgid:  {msgid[:160]!r}\n    msgstr: {'...' if at else ''}{msgstr[at:at + 160]!r}"


def test_glossary_entries_are_complete():
    problems = []
    seen = set()
    for term in TERMS:
        where = term.get("en", term)
        for key in ("en", "zh", "meaning"):
            if not term.get(key):
                problems.append(f"{where}: no {key!r}")
        meaning = term.get("meaning") or {}
        if not meaning.get("en") or not CJK.search(meaning.get("zh_CN", "")):
            problems.append(f"{where}: the meaning needs an English 'en' and a Chinese 'zh_CN'")
        if bool(term.get("keep_english")) != (term.get("zh") == term.get("en")):
            problems.append(f"{where}: keep_english must be true exactly when zh is the English term")
        if not term.get("keep_english") and not CJK.search(term.get("zh", "")):
            problems.append(f"{where}: zh {term.get('zh')!r} is not Chinese (set keep_english for the allow-list)")
        for banned in term.get("banned", []):
            if banned in term["zh"]:
                problems.append(f"{where}: the banned {banned!r} is part of the rendering {term['zh']!r}")
        if term.get("en") in seen:
            problems.append(f"{where}: listed twice")
        seen.add(term.get("en"))
    assert not problems, "docs/glossary.yaml:\n" + "\n".join(problems)


def test_catalogs_exist():
    assert MESSAGES, f"no translated message in {[str(d) for d in CATALOG_DIRS]}"


def banned_renderings(messages=None) -> list[str]:
    """Renderings the glossary bans: a term's ``banned``, a calque's ``avoid``."""
    found = []
    rules = [(t["en"], t["zh"], t.get("banned", []), t.get("banned_where_msgid_says")) for t in TERMS]
    rules += [(c["en"], c["write"], c["avoid"], c.get("banned_where_msgid_says")) for c in CALQUES]
    for name, msgid, msgstr in _real("banned_renderings") if messages is None else messages:
        text = prose(msgstr)
        english = prose(msgid)
        for en, zh, banned_list, only_for in rules:
            if only_for and (zh in text or not any(_word(w).search(english) for w in only_for)):
                continue  # the English does not say it, or the term is rendered right and the word means else
            for banned in banned_list:
                if banned in text:
                    found.append(f"{_where(name, msgid, msgstr, banned)}\n    uses {banned!r} for {en!r}: "
                                 f"write {zh!r} (docs/glossary.yaml)")
    return found


def test_no_banned_rendering():
    found = banned_renderings()
    assert not found, f"{len(found)} banned renderings:\n" + "\n".join(found)


def _renderings(term) -> list[str]:
    """What may stand for ``term`` in Chinese: each part of its rendering, its abbreviations."""
    parts = [p.strip() for p in re.split(r" / |（|）", term["zh"]) if p.strip()]
    return parts + term.get("abbr", []) + term.get("also", [])


def renderings_missing(messages=None) -> list[str]:
    """A glossary term the English says and the Chinese says another way (or not at all)."""
    found = []
    checked = [t for t in TERMS if not t.get("keep_english") and t.get("forms", [t["en"]])]
    for name, msgid, msgstr in _real("renderings_missing") if messages is None else messages:
        if not CJK.search(msgstr):
            continue
        english = prose(re.sub(r"\{\w+\}(?!`)", " ", msgid))  # not the {fields} of an output template
        text = re.sub(r"\\ |\*+\s?", "", msgstr)  # *协作式*\ 启动, *无偏置* 层归一化: one term each
        for term in checked:
            form = next((f for f in term.get("forms", [term["en"]]) if _word(f).search(english)), None)
            if form and not any(r in text for r in _renderings(term)):
                found.append(f"{_where(name, msgid, msgstr)}\n    says {form!r} in English, but not "
                             f"{term['zh']!r} in Chinese (docs/glossary.yaml; add a rendering to the term's "
                             "'also' only if it is the same word, shorter)")
    return found


def test_terms_are_rendered_as_the_glossary_says():
    found = renderings_missing()
    assert not found, f"{len(found)} terms written another way:\n" + "\n".join(found)


_HAN = "\u3400-\u9fff"
PUNCTUATION = [
    (re.compile(r"\d\s+%"), "a space before %: write 100% (GB/T 15835), as everywhere else in the edition"),
    (re.compile(f"(?<=[{_HAN}）”])[:;,?!](?=\\s|$|[{_HAN}])"), "a half-width mark after Chinese text: write ：；，？！"),
    (re.compile(f"[{_HAN}][A-Za-z0-9]|[A-Za-z0-9][{_HAN}]"), "no space between Chinese and a Latin word or number"),
    (re.compile(f"\\([^()]*[{_HAN}][^()]*\\)"), "half-width brackets around Chinese text: write （）"),
]


def punctuation(messages=None) -> list[str]:
    found = []
    for name, msgid, msgstr in _real("punctuation") if messages is None else messages:
        if name.startswith("docs/locale/zh_CN/code/"):
            continue  # code: tests/pages/test_code_i18n.py
        if not CJK.search(msgstr):
            continue
        text = prose(msgstr)
        for pattern, why in PUNCTUATION:
            for m in pattern.finditer(text):
                found.append(f"{_where(name, msgid, msgstr)}\n    {text[max(0, m.start() - 20):m.end() + 20]!r}: {why}")
    return found


def test_punctuation_is_chinese():
    found = punctuation()
    assert not found, f"{len(found)} punctuation problems:\n" + "\n".join(found)


# A word of English prose: three letters or more, lower case after the first (GPU, BLOCK_N and
# SMs are names), not part of an identifier or a path (x.mean, ln_tutorial, tools/tune.py, a=1).
_ENGLISH = re.compile(r"(?<![\w./=-])[A-Za-z][a-z]{2,}(?:'[a-z]+)?(?![\w/=(-]|\.\w)")


def english_words(text: str, allowed=frozenset()) -> list[str]:
    """The English words of ``text`` outside identifiers, the glossary's allow-list and ``allowed``."""
    text = re.sub(r"``.+?``|`[^`]*`|\{[^{}]*\}|\w+://\S+", " ", text)
    return [m.group(0) for m in _ENGLISH.finditer(text)
            if m.group(0).lower() not in ALLOWED_ENGLISH and m.group(0) not in allowed]


# An English gloss in brackets right after Chinese text: 线程块集群（thread-block cluster）.
_GLOSS = re.compile(r"(?<=[\u3400-\u9fff])\s?[（(][A-Za-z][A-Za-z ,/-]*[）)]")


def english_left(messages=None) -> list[str]:
    found = []
    checked = [t for t in TERMS if not t.get("keep_english")]
    for name, msgid, msgstr in MESSAGES if messages is None else messages:
        if not CJK.search(msgstr):  # a name, code or a formula kept as it is
            continue
        text = _GLOSS.sub(" ", prose(msgstr))
        for term in checked:
            for form in term.get("forms", [term["en"]]):
                match = _word(form).search(text)
                if match:
                    found.append(f"{_where(name, msgid, msgstr, match.group(0))}\n    keeps the English {match.group(0)!r} "
                                 f"({term['en']!r}): write {term['zh']!r} (docs/glossary.yaml)")
    return found


def test_no_english_term_left_in_chinese_text():
    found = english_left()
    assert not found, (f"{len(found)} English terms left in Chinese text (add the term to the allow-list in "
                       "docs/glossary.yaml only if Chinese writing keeps it in English):\n" + "\n".join(found))


# reST inline markup is recognized only with a suitable neighbour (docutils'
# rules): before the start, whitespace or an opening/delimiting punctuation
# mark; after the end, whitespace or a closing/delimiting one. A full-width
# "（" after ``x`` or a Chinese character before ``x`` leaves the markup raw.
_BEFORE = re.compile(f"[\\s{punctuation_chars.openers}{punctuation_chars.delimiters}]")
_AFTER = re.compile(
    f"[\\s{punctuation_chars.closing_delimiters}{punctuation_chars.delimiters}{punctuation_chars.closers}]")
_REST_MARKUP = re.compile(r"``.+?``|(?<![`\w]):[\w:.-]+:`[^`]+`|(?<![*`])\*\*[^*\s][^*]*?\*\*(?!\*)"
                          r"|(?<![*`\w])\*[^*\s][^*]*?\*(?![*`])")


def _rest_catalog(name: str) -> bool:
    """Pages written in reST: the .rst sources, the gallery and the docstrings (the .md pages are MyST)."""
    stem = name.rsplit("/", 1)[-1][:-3]
    return "/tutorials/" in name or stem in {"index", "api"} or not (DOCS / f"{stem}.md").exists()


def broken_markup(messages=None) -> list[str]:
    found = []
    for name, msgid, msgstr in MESSAGES if messages is None else messages:
        if not _rest_catalog(name) or name.startswith("docs/_ext/"):
            continue
        for m in _REST_MARKUP.finditer(msgstr):
            before = msgstr[m.start() - 1] if m.start() else " "
            after = msgstr[m.end()] if m.end() < len(msgstr) else " "
            if not _BEFORE.match(before):
                found.append(f"{_where(name, msgid, msgstr, m.group(0))}\n    {before + m.group(0)!r}: put a space before "
                             f"{m.group(0)!r}, or the reader sees the raw markup")
            if not _AFTER.match(after):
                found.append(f"{_where(name, msgid, msgstr, m.group(0))}\n    {m.group(0) + after!r}: put a space (or ASCII "
                             f"punctuation) after {m.group(0)!r}, or the reader sees the raw markup")
    return found


def test_inline_markup_survives_translation():
    found = broken_markup()
    assert not found, f"{len(found)} inline markups broken by the translation:\n" + "\n".join(found)


# Terms a page defines: in italics (*vector-Jacobian product*), or in bold
# within a sentence. Bold at the start of a message is a run-in heading.
_ITALIC = re.compile(r"(?<![*\w`])\*([^*\s][^*]*?)\*(?![*\w`])")
_BOLD = re.compile(r"(?<!^)(?<![*\w`])\*\*([^*\s][^*]*?)\*\*(?![*\w`])")


def _known(candidate: str) -> bool:
    words = candidate.lower().strip()
    for term in TERMS:
        names = [term["en"], *term.get("forms", []), *term.get("abbr", [])]
        for name in names:
            name = name.lower()
            if _word(words).search(name) or _word(name).search(words):
                return True
    return False


def defined_terms_missing(messages=None) -> list[str]:
    missing = []
    for name, msgid, _ in MESSAGES if messages is None else messages:
        text = re.sub(r"``.+?``|`[^`]*`|\$[^$]+\$", " ", msgid)
        for pattern in (_ITALIC, _BOLD):
            for m in pattern.finditer(text):
                candidate = m.group(1).strip()
                if candidate.lower() in EMPHASIS_ONLY or re.search(r"[.:!?]$", candidate):
                    continue
                if not _known(candidate):
                    missing.append(f"{name}: {candidate!r} (in {msgid[:100]!r})")
    return sorted(set(missing))


def test_terms_the_pages_define_are_in_the_glossary():
    missing = defined_terms_missing()
    assert not missing, ("terms the pages define or set in bold, missing from docs/glossary.yaml (add them with "
                         "their Chinese rendering, or to EMPHASIS_ONLY if the page only emphasises a word):\n"
                         + "\n".join(missing))


def test_chinese_search_knows_every_glossary_term():
    """Sphinx's Chinese index splits words with jieba and this word list: every glossary term is a word of it."""
    words = {line.split()[0] for line in (DOCS / "locale" / "zh_CN" / "search_words.txt").read_text(
        encoding="utf-8").splitlines() if line.strip()}
    # jieba's words are runs of Chinese characters: 向量-雅可比积 and CUDA 图 are split anyway
    missing = [part for t in TERMS if not t.get("keep_english") for part in re.split(r" / |（|）", t["zh"])
               if re.fullmatch(r"[\u3400-\u9fff]+", part) and part not in words]
    banned = [b for t in TERMS for b in t.get("banned", []) if b in words]
    assert not missing, f"add to docs/locale/zh_CN/search_words.txt: {missing}"
    assert not banned, f"banned renderings in docs/locale/zh_CN/search_words.txt: {banned}"


# The checks themselves, on planted mistakes: a check that cannot fail is no check.
PLANTED = "docs/locale/zh_CN/LC_MESSAGES/tutorials/planted.po"


@pytest.mark.parametrize(
    "check, msgid, msgstr",
    [
        (banned_renderings, "Each program uses 4 warps.", "每个程序使用 4 个线程束。"),
        (banned_renderings, "The grid barrier's generation.", "全网格屏障的代数。"),
        (banned_renderings, "Subtracting them cancels digits.", "相减时数值抵消。"),
        (english_left, "The launcher picks a configuration.", "launcher 选择一个配置。"),
        (english_left, "A thread-block cluster.", "一个 thread-block cluster。"),
        (broken_markup, "Program ``2r + k`` (its rank ``k``).", "程序 ``2r + k``（``k`` 是序号）。"),
        (broken_markup, "The ``x`` value.", "数值``x`` 。"),
        (broken_markup, "Use :func:`f` here.", "在此使用 :func:`f`（一个函数）。"),
        (defined_terms_missing, "A *flux capacitor* stores time.", "*通量电容* 存储时间。"),
    ],
)
def test_each_check_catches_a_planted_mistake(check, msgid, msgstr):
    assert check([(PLANTED, msgid, msgstr)]), f"{check.__name__} missed {msgstr!r}"


@pytest.mark.parametrize(
    "msgid, msgstr",
    [
        ("Each program uses 4 warps.", "每个程序使用 4 个 warp。"),
        ("Program ``2r + k`` (its rank ``k``).", "程序 ``2r + k`` （ ``k`` 是序号）。"),
        ("A thread-block cluster.", "一个线程块集群（thread-block cluster）。"),
        ("The branch costs what the exchange saves.", "分支的开销抵消了交换省下的时间。"),
        ("Sums that cancel cost what they save.", "会相消的和，其开销抵消了收益。"),
        ("Liger-Kernel and ``launcher``.", "Liger-Kernel 和 ``launcher``。"),
    ],
)
def test_the_checks_pass_correct_text(msgid, msgstr):
    message = [(PLANTED, msgid, msgstr)]
    assert not (banned_renderings(message) + english_left(message) + broken_markup(message))


CHECKS = {f.__name__: f for f in (banned_renderings, renderings_missing, punctuation)}


@pytest.mark.parametrize("catalog, rule", sorted(PENDING))
def test_pending_catalogs_still_need_work(catalog, rule):
    """An exemption in PENDING lasts as long as the catalog fails the rule: then remove it."""
    found = CHECKS[rule]([m for m in MESSAGES + CODE_MESSAGES if m[0] == catalog])
    assert found, f"{catalog} passes {rule} now: remove it from PENDING in tests/pages/test_terms.py"


# The checks on planted mistakes in real text: a real message of the catalogs, copied and
# changed the way a translator goes wrong. The copy must fail the check; the original passes it.
def _real_message(msgstr_has: str, msgid_says: str = "") -> tuple[str, str, str]:
    for name, msgid, msgstr in MESSAGES:
        if re.search(msgstr_has, msgstr) and re.search(msgid_says, msgid) and "/api.po" not in name:
            return name, msgid, msgstr
    raise LookupError(f"no real message has {msgstr_has!r} (the English saying {msgid_says!r}): pick another")


PLANTED_IN_REAL_TEXT = [
    # (check, the real message: its msgstr has / its msgid says, the planted change)
    (banned_renderings, ("启动器", r"\blauncher"), lambda s: s.replace("启动器", "启动函数", 1)),
    (banned_renderings, ("。", r"\bmachinery\b"), lambda s: s.replace("。", "，这套机制更复杂。", 1)),
    (banned_renderings, ("。", r"\bin flight\b"), lambda s: s.replace("。", "，在途的加载更多。", 1)),
    (banned_renderings, ("反向传播", r"\bpersistent\b"), lambda s: s + "持久化内核随后结束。"),
    (renderings_missing, ("启动器", r"\blauncher"), lambda s: s.replace("启动器", "启动程序")),
    (renderings_missing, ("归约", r"\breduction\b"), lambda s: s.replace("归约", "规约")),
    (english_left, ("归约", r"\breduction\b"), lambda s: s.replace("归约", " reduction ", 1)),
    (punctuation, (r"\d%", ""), lambda s: re.sub(r"(\d)%", r"\1 %", s, count=1)),
    (punctuation, ("[\u4e00-\u9fff]：", ""), lambda s: re.sub("([\u4e00-\u9fff])：", r"\1:", s, count=1)),
    (punctuation, ("[\u4e00-\u9fff] [A-Za-z]", ""), lambda s: re.sub("([\u4e00-\u9fff]) ([A-Za-z])", r"\1\2", s, count=1)),
    (punctuation, ("（[^（）`]*[\u4e00-\u9fff][^（）`]*）", ""), lambda s: re.sub("（([^（）`]*[\u4e00-\u9fff][^（）`]*)）", r"(\1)", s, count=1)),
]


@pytest.mark.parametrize("check, real, plant", PLANTED_IN_REAL_TEXT,
                         ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(PLANTED_IN_REAL_TEXT)])
def test_each_check_catches_a_mistake_planted_in_real_text(check, real, plant):
    name, msgid, msgstr = _real_message(*real)
    planted = plant(msgstr)
    assert planted != msgstr
    assert not check([(name, msgid, msgstr)]), f"{check.__name__} fails the real message itself: {msgstr!r}"
    assert check([(name, msgid, planted)]), f"{check.__name__} missed the planted mistake in {planted!r}"


def test_english_words_sees_prose_not_identifiers():
    assert english_words("按行 x.mean 的 ln_tutorial, BLOCK_N, GPU, warp, Triton, float16, tools/tune.py, a=1") == []
    assert english_words("每个程序 holds a tile 的数据") == ["holds", "tile"]
