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

ROOT = Path(__file__).resolve().parents[2]
LOCALE = ROOT / "docs" / "locale"
LANGS = sorted(p.parent.name for p in LOCALE.glob("*/code"))
ln_gallery = load_module("ln_gallery", ROOT / "docs" / "_ext" / "ln_gallery.py")
SCRIPTS = {p.stem: (p, True) for p in sorted((ROOT / "examples").glob("[0-9][0-9]_*.py"))}
SCRIPTS["layer_norm_triton"] = (ROOT / "ln_tutorial_book" / "plain.py", False)
CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")  # Chinese characters and punctuation
# Tokens whose translation is code, not Chinese text: a separator line, the font list. And tokens that
# print half of a line whose other half is no message (a value, "than {...}"): they stay English, so
# that the page's output translation (docs/_ext/ln_i18n_outputs.py) translates the whole line.
NOT_PROSE = {"# " + "-" * 75, '"DejaVu Sans"',
             'f"{len(bench.compare(bench.load_results(), rows))} points differ from the recorded run by more "',
             'f"copy {point[\'copy\']:.0f} GB/s"'}
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
    """As tests/pages/test_i18n.py checks for the core pages: every message of the page's catalog reaches its script."""
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


# -- What the pages print and draw (docs/_ext/ln_i18n_outputs.py, code/outputs.po, code/package.po) --------
outputs_ext = load_module("ln_i18n_outputs", ROOT / "docs" / "_ext" / "ln_i18n_outputs.py")
ZH = [lang for lang in LANGS if lang.startswith("zh")]
SITE = Path(os.environ.get("LN_TUTORIAL_SITE_DIR", ROOT / "docs" / "_build" / "html"))
IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}

# A copy of real outputs of the examples (a CPU run; the tables' numbers cut short): every line must
# come out without English prose. The checks below plant mistakes into copies of these lines.
REAL_OUTPUT = """\
No CUDA GPU found: the kernels run on the CPU through Triton's interpreter (TRITON_INTERPRET=1), on small inputs.
exact variance           0.986566
E[x^2] - E[x]^2, float32 1.062500
E[(x - E[x])^2], float32 0.986566
     N    dtype  BLOCK_N  warps  values per thread
   256  float16      256      1                  8
 16384  float16    16384     16                 32
    dtype   vs torch  vs default      tol  ok
  float32   2.89e-07    0.00e+00    1e-05  yes
 bfloat16   4.18e-03    0.00e+00    2e-02  yes
dx: relative difference to autograd 1.5e-16
columns whose float32 sum depends on the order of the rows: 890 of 1024
    dtype  grad       ours      torch    default      tol  ok
  float32    dx   7.17e-08   8.69e-08   7.17e-08    1e-05  yes
identical gradients when run again: True
No CUDA GPU found: showing the recorded GPU results; the kernels run
on the CPU through Triton's interpreter (TRITON_INTERPRET=1), on small inputs.
         provider   forward, tutorial  backward, tutorial        forward, llm       backward, llm
    torch.compile                79 %                43 %                93 %                68 %
 ln_tutorial-lock                   -                31 %                   -                30 %
            plain: max |difference to torch| in y, dx, dw, db: 7.2e-07, 1.8e-07, 1.2e-06, 4.8e-07
row bytes  BLOCK_M  warps  values per thread  bytes per program
     2048        8      4                 64              16384
evidence for 8 KB rows: tools/tune.py at 16384 x 4096 bfloat16
      N     dtype  BLOCK_M  BLOCK_N  TAIL_N  warps  looped
   9216   float16        1     2048       0      8    True
looped kernel against the plain kernel, max |difference|: 0.00012421607971191406
lock strategy: 1 different dw out of 5 runs (interpreter: programs run in a fixed order)
lock strategy, dw: relative error 2.6e-07
row bytes  BLOCK_M  warps  per SM  stages  reload  accumulators per thread  bytes in flight
     2048        4      4       1       4   False                       64            65536
2-byte values: parts of 2048 columns, 4 warps, 4 programs per SM (about 1.67x the looped kernels at 8192 x 16384 bfloat16)
      N     dtype  BLOCK_M  BLOCK_N  warps  per SM  stages  reload  TAIL_N  looped  split
  12800   float16        1     2048      4       4       1   False       0   False   True
dw: default against plain, max |difference| 1.9e-06"""

# ...and lines of the Chinese run, whose prints are translated already and whose values are the package's.
REAL_ZH_OUTPUT = """\
8 KB 行的依据： tools/tune.py at 16384 x 4096 bfloat16
2 字节的值：每部分 2048 列，4 个 warp，每个 SM 4 个程序（about 1.67x the looped kernels at 8192 x 16384 bfloat16）
float32 求和结果随行的相加顺序而变的列数： 890 of 1024"""


def _outputs(lang):
    return outputs_ext.Translator(outputs_ext._read_po(LOCALE / lang / "code" / "outputs.po"))


def english_left_in_output(text: str) -> list[str]:
    """English words of a translated output: identifiers (x.y, a_b, a-b, a=1) and the glossary's names allowed."""
    return english_words(text)


def misaligned(text: str) -> list[str]:
    """Lines of a table whose cells do not end where the header's do (display width, right-aligned)."""
    problems, edges = [], None
    for line in text.split("\n"):
        if not outputs_ext._table_like(line) or re.search(r"[:：]", line):
            edges = None
            continue
        cells = {outputs_ext.width(line[:m.end()]) for m in re.finditer(r"\S+", line)}
        if not re.search(r"\d", line):  # a header
            edges = cells
        elif edges is not None and not cells <= edges | {max(cells)} and not cells <= edges:
            problems.append(f"{line!r}: cells end at {sorted(cells - edges)}, the header's at {sorted(edges)}")
    return problems


@pytest.mark.parametrize("lang", ZH)
def test_output_catalog_is_chinese_and_keeps_its_fields(lang):
    problems = []
    for context, msgid, msgstr in outputs_ext._read_po(LOCALE / lang / "code" / "outputs.po"):
        if not CJK.search(msgstr):
            problems.append(f"not Chinese: {msgid!r} -> {msgstr!r}")
        if sorted(outputs_ext._FIELD.findall(msgid)) != sorted(outputs_ext._FIELD.findall(msgstr)):
            problems.append(f"fields differ: {msgid!r} -> {msgstr!r}")
        if english_words(outputs_ext._FIELD.sub(" ", msgstr)):
            problems.append(f"English left: {msgstr!r}: {english_words(outputs_ext._FIELD.sub(' ', msgstr))}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("lang", ZH)
def test_package_code_catalog_is_complete_current_and_chinese(lang):
    """code/package.po: the comments and docstrings of the package code the pages show, no more, in Chinese."""
    wanted = outputs_ext.shown_package_messages(ROOT / "examples")
    catalog = {m.id: m for m in _catalog(lang, "package") if m.id}
    assert not [m for m in wanted if m not in catalog], (
        f"shown package comments without a translation: {[m for m in wanted if m not in catalog]}")
    assert not [m for m in catalog if m not in wanted], (
        f"package.po entries no longer shown: {[m for m in catalog if m not in wanted]}")
    sources = "\n".join(p.read_text(encoding="utf-8") for d in ("ln_tutorial", "ln_tutorial_book")
                        for p in (ROOT / d).rglob("*.py"))
    identifiers = _identifiers(sources)
    for message in catalog.values():
        assert message.string and not message.fuzzy and CJK.search(message.string), message.id
        assert not english_prose(message.id, message.string, identifiers), (message.string,
                                                                           english_prose(message.id, message.string, identifiers))


@pytest.mark.parametrize("lang", ZH)
def test_real_outputs_translate_completely_and_stay_aligned(lang):
    translated = _outputs(lang).block(REAL_OUTPUT + "\n" + REAL_ZH_OUTPUT)
    left = {line: english_left_in_output(line) for line in translated.split("\n") if english_left_in_output(line)}
    assert not left, "English left in translated outputs:\n" + "\n".join(f"{k!r}: {v}" for k, v in left.items())
    assert not misaligned(translated), "\n".join(misaligned(translated))
    assert not re.search(r"\d %", translated), "100 % left with its space"


@pytest.mark.parametrize("lang", ZH)
def test_explain_translates_for_every_path(lang, monkeypatch):
    """``ln_tutorial.explain`` for rows from 1 to 65536 values, every dtype, variants on and off."""
    import torch

    import ln_tutorial

    outputs, found = _outputs(lang), {}
    for variants in (True, False):
        ln_tutorial.use_variants(variants)
        try:
            for n in (1, 100, 1024, 3000, 4097, 9216, 12289, 16384, 32768, 65536, 131072):
                for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
                    for line in str(ln_tutorial.explain((64, n), dtype)).split("\n"):
                        new = outputs.line(line)
                        if english_left_in_output(new):
                            found[line] = english_left_in_output(new)
        finally:
            ln_tutorial.use_variants(True)
    assert not found, "explain() lines left in English:\n" + "\n".join(f"{k!r}: {v}" for k, v in found.items())


@pytest.mark.parametrize("lang", ZH)
def test_every_tuning_evidence_translates(lang):
    """The reasons explain() prints come from the tuning tables: each translates, on any GPU's table."""
    import json

    outputs = _outputs(lang)
    evidence = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                evidence.add(value) if key == "evidence" else walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for table in (ROOT / "ln_tutorial" / "data" / "tuning").glob("*.json"):
        walk(json.loads(table.read_text(encoding="utf-8")))
    evidence.add("generic rule")
    left = {e: outputs.segment(e) for e in sorted(evidence)
            if outputs.segment(e) is None or english_left_in_output(outputs.segment(e))}
    assert not left, "tuning evidence without a Chinese template:\n" + "\n".join(f"{k!r} -> {v!r}" for k, v in left.items())


@pytest.mark.parametrize("lang", ZH)
def test_benchmark_tables_and_figures_translate(lang):
    """The package's benchmark tables and the labels of its plot, on the shipped results."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bench = pytest.importorskip("ln_tutorial_book.bench")
    outputs = _outputs(lang)
    rows = bench.shipped_results()
    assert rows, "no shipped benchmark results to translate"
    printed = "\n".join([bench.provenance(rows)] + [bench.format_table(rows, mode) for mode in bench.MODES]
                        + [bench.llm_table(rows, mode) for mode in bench.MODES])
    translated = outputs.block(printed)
    left = [line for line in translated.split("\n") if english_left_in_output(line)]
    assert not left, "benchmark table lines left in English:\n" + "\n".join(left)
    assert not misaligned(translated), "\n".join(misaligned(translated))
    for mode in bench.MODES:
        ax = bench.plot_sweep(rows, mode)
        outputs_ext.translate_figure(ax.figure, outputs)
        # the title's first line stays apart from the provenance below it, which a field could swallow
        assert ax.get_title().split("\n")[0] == outputs.segment(f"layer-norm-{mode}, M = 4096, float16")
        texts = [t.get_text() for t in ax.figure.findobj(matplotlib.text.Text) if t.get_text()]
        left = [t for t in texts if english_left_in_output(t)]
        plt.close(ax.figure)
        assert not left, f"figure texts left in English ({mode}): {left}"


@pytest.mark.parametrize("lang", ZH)
@pytest.mark.parametrize("plant", [
    lambda line: line + " for each row",  # English added to a translated line
    lambda line: line.replace("：", ": the ", 1),
])
def test_the_output_check_catches_english_planted_in_real_outputs(lang, plant):
    """Each real line, translated, passes the check; with English planted in it, it fails."""
    outputs = _outputs(lang)
    lines = [outputs.line(line) for line in REAL_OUTPUT.split("\n") if re.search(r"[A-Za-z]{3}", line)]
    planted = [plant(line) for line in lines if "：" in line]
    assert planted
    for line in planted:
        assert english_left_in_output(line), f"missed the English planted in {line!r}"


@pytest.mark.parametrize("lang", ZH)
def test_the_output_check_catches_an_output_line_no_template_knows(lang):
    outputs = _outputs(lang)
    new_line = "the forward waits for the host between calls: 12 us"
    assert outputs.line(new_line) == new_line
    assert english_left_in_output(outputs.line(new_line))


@pytest.mark.parametrize("lang", ZH)
def test_the_alignment_check_catches_a_shifted_column(lang):
    table = _outputs(lang).block("     N    dtype  BLOCK_N  warps  values per thread\n   256  float16      256      1                  8")
    assert not misaligned(table)
    header, row = table.split("\n")
    assert misaligned(header + "\n" + row.replace("  256", " 256", 1).replace("  1 ", "   1 "))


@pytest.mark.parametrize("lang", ZH)
def test_recorded_outputs_translate_completely(lang):
    """The outputs recorded on a GPU (docs/recorded/, ln_recorded) leave no English on the edition's pages."""
    pages = sorted((ROOT / "docs" / "recorded").glob("*/*.rst"))
    if not pages:
        pytest.skip("no recorded outputs (docs/recorded/) yet")
    outputs, left = _outputs(lang), []
    for page in pages:
        for block in re.findall(r"\.\. rst-class:: sphx-glr-script-out\n\n \.\. code-block:: none\n\n(.*?)(?=\n\S|\Z)",
                                page.read_text(encoding="utf-8"), re.S):
            text = "\n".join(line[4:] for line in block.split("\n"))
            left += [f"{page.relative_to(ROOT)}: {line!r}" for line in outputs.block(text).split("\n")
                     if english_left_in_output(line)]
    assert not left, "recorded output lines left in English:\n" + "\n".join(left)


def _built_pages(lang):
    base = SITE / lang / "tutorials"
    if not (base / "01_forward.html").exists():
        reason = f"the {lang} site is not built ({base}): run python docs/build.py"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return sorted(base.glob("[0-9][0-9]_*.html"))


@pytest.mark.site
@pytest.mark.parametrize("lang", ZH)
def test_built_pages_show_outputs_and_comments_in_chinese(lang):
    """On the built pages: printed outputs and code comments (also of shown package code) without English prose."""
    import html

    problems = []
    for page in _built_pages(lang):
        text = page.read_text(encoding="utf-8")
        outs = re.findall(r'<div class="sphx-glr-script-out[^"]*">.*?<pre>(.*?)</pre>', text, re.S)
        comments = re.findall(r'<span class="c1">(.*?)</span>', text)
        names = set(re.findall(r'<span class="n[a-z]?">([^<]+)</span>', text))  # the page's identifiers
        for chunk in outs + comments:
            for line in html.unescape(re.sub(r"<[^>]+>", "", chunk)).split("\n"):
                left = english_words(line, names)
                if left and not re.fullmatch(r"#\s*fmt:\s*\w+", line.strip()):
                    problems.append(f"{page.name}: {line.strip()!r}: {left}")
    assert not problems, f"{len(problems)} lines with English on the built pages:\n" + "\n".join(problems[:80])


@pytest.mark.parametrize("lang", ZH)
def test_the_book_figures_translate(lang):
    """The figures of pages 1 and 2 (ln_tutorial_book.figures), as the examples draw them."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    figures = pytest.importorskip("ln_tutorial_book.figures")
    outputs, left = _outputs(lang), {}
    x = torch.randn(3, 4)
    drawn = [figures.normalized_matrices([("input", x), ("batch norm: per column", x), ("layer norm: per row", x)]),
             figures.lock_timeline(rows=8, buffers=3), figures.private_partials(rows=8, programs=3)]
    for fig in drawn:
        fig = getattr(fig, "figure", None) or plt.gcf() if fig is None or not hasattr(fig, "findobj") else fig
        outputs_ext.translate_figure(fig, outputs)
        fig.canvas.draw()  # tick labels given as text are set at each draw
        for text in fig.findobj(matplotlib.text.Text):
            if english_left_in_output(text.get_text()):
                left[text.get_text()] = english_left_in_output(text.get_text())
        plt.close(fig)
    assert not left, f"figure texts left in English: {left}"
