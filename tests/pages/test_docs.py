"""Fast checks of the docs sources that need neither Sphinx nor a browser.

* The source markers in ``examples/`` expand to the package's current source
  (``docs/_ext/ln_gallery.py``), every marker names an existing object, and the
  expanded scripts compile.
* The scripts switch Triton to its interpreter before anything imports Triton
  or ``ln_tutorial``.
* The text cells use only reST that sphinx-gallery turns into Markdown for the
  notebooks, so no raw directive or role is left in a downloaded ``.ipynb``.
* The configuration, templates and static files request nothing from other
  sites, and the root page written by ``docs/build.py`` links every edition.

The built site itself is checked in a browser by ``tests/site/test_site.py``.
"""

import ast
import inspect
import re
from pathlib import Path

import pytest

from helpers import load_module

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = sorted((ROOT / "examples").glob("[0-9][0-9]_*.py"))


ln_gallery = load_module("ln_gallery", DOCS / "_ext" / "ln_gallery.py")
build = load_module("ln_docs_build", DOCS / "build.py")


def _markers(path):
    return [m["target"] for m in ln_gallery.MARKER.finditer(path.read_text(encoding="utf-8"))]


def test_there_are_five_examples_with_markers():
    assert [p.name for p in EXAMPLES] == ["01_forward.py", "02_backward.py", "03_benchmark.py",
                                         "04_forward_advanced.py", "05_backward_advanced.py"]
    assert all(_markers(p) for p in EXAMPLES if p.name != "03_benchmark.py")  # it shows no kernel


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_markers_expand_to_the_current_source(path):
    import importlib

    expanded = ln_gallery.expand_text(path.read_text(encoding="utf-8"))
    assert not ln_gallery.MARKER.search(expanded), "a marker was left unexpanded"
    compile(expanded, str(path), "exec")  # still valid Python
    for target in _markers(path):
        module_name, _, name = target.rpartition(".")
        obj = getattr(importlib.import_module(module_name), name)
        obj = getattr(obj, "fn", obj)  # a Triton JITFunction wraps the Python function
        if inspect.isfunction(obj) or inspect.isclass(obj):
            source = inspect.getsource(obj).rstrip("\n")
            assert source in expanded, f"{target}: expanded text differs from inspect.getsource"


def test_expand_examples_mirrors_the_directory(tmp_path):
    out = tmp_path / "examples"
    (out / "stale.py").parent.mkdir(parents=True)
    (out / "stale.py").write_text("old")
    written = ln_gallery.expand_examples(ROOT / "examples", out)
    names = sorted(p.name for p in written)
    assert "GALLERY_HEADER.rst" in names and "01_forward.py" in names
    assert not (out / "stale.py").exists()
    mtime = (out / "01_forward.py").stat().st_mtime_ns
    ln_gallery.expand_examples(ROOT / "examples", out)  # unchanged content: file untouched
    assert (out / "01_forward.py").stat().st_mtime_ns == mtime


def test_unknown_marker_target_fails_loudly():
    with pytest.raises(LookupError):
        ln_gallery.expand_text("# ln_tutorial:source ln_tutorial.kernels.no_such_kernel\n")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_interpreter_is_chosen_before_triton_is_imported(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    set_line = None
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "cuda.is_available" in ast.unparse(node.test):
            if 'os.environ["TRITON_INTERPRET"] = "1"' in ast.unparse(node) or "os.environ['TRITON_INTERPRET'] = '1'" in ast.unparse(node):
                set_line = node.lineno
                assert "print(" in ast.unparse(node), "the script must say that it switched to the interpreter"
    assert set_line, "no `if not torch.cuda.is_available(): os.environ['TRITON_INTERPRET'] = '1'`"
    for node in tree.body:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        if any(n.split(".")[0] in ("triton", "ln_tutorial") for n in names):
            assert node.lineno > set_line, f"line {node.lineno} imports {names} before the interpreter switch"


# reST in text cells that sphinx-gallery converts for notebooks: headings, math,
# note/warning, code-block, links. Anything else would stay raw in the .ipynb.
_ALLOWED_DIRECTIVES = {"math", "note", "warning", "code-block"}


def _text_cell_lines(path):
    """The comment lines of the ``# %%`` text cells, and the module docstring."""
    text = path.read_text(encoding="utf-8")
    lines = ast.get_docstring(ast.parse(text), clean=False).splitlines()
    in_text = False
    for line in text.splitlines():
        if line.startswith("# %%"):
            in_text = True
            continue
        if in_text and line.startswith("#"):
            lines.append(line[2:] if line.startswith("# ") else line[1:])
        elif in_text:
            in_text = False
    return lines


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_text_cells_convert_cleanly_to_markdown(path):
    for line in _text_cell_lines(path):
        directive = re.match(r"^(\s*)\.\. ([\w-]+)::", line)
        if directive:
            assert directive[2] in _ALLOWED_DIRECTIVES, f"directive {directive[2]!r} stays raw in the notebook"
            assert directive[1] == "", f"indented {directive[2]!r} is not converted for notebooks: {line!r}"
        assert not re.search(r":(?!math:)[a-z]+(?::[a-z]+)?:`", line), f"a Sphinx role stays raw in the notebook: {line!r}"
        assert not re.match(r"^\s*\.\. (\[|_|\|)", line), f"footnote/target/substitution: {line!r}"


def test_site_requests_nothing_from_other_sites():
    conf = (DOCS / "conf.py").read_text(encoding="utf-8")
    extensions = next(
        ast.literal_eval(node.value)
        for node in ast.parse(conf).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "extensions"
    )
    assert "sphinx-mathjax-offline" in extensions  # MathJax from _static, not a CDN
    assert not {"sphinx.ext.intersphinx", "sphinxcontrib.googleanalytics"} & set(extensions)
    assert not re.search(r"mathjax_path\s*=\s*[\"']https?:", conf)
    for path in list((DOCS / "_templates").rglob("*")) + list((DOCS / "_static").rglob("*")):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text), path
            assert not re.search(r"url\(\s*[\"']?(https?:)?//|@import", text), path


def test_remote_resource_scan(tmp_path):
    (tmp_path / "a.html").write_text(
        '<a href="https://arxiv.org">ok, a link</a><script src="_static/x.js"></script>'
        '<script src="https://cdn.jsdelivr.net/x.js"></script><img src="//example.com/i.png">'
    )
    (tmp_path / "s.css").write_text("@font-face{src:url(https://fonts.gstatic.com/x.woff2)}")
    found = build.remote_resources(tmp_path)
    assert len(found) == 3 and not any("arxiv" in f for f in found)


def test_root_index_links_every_edition(tmp_path):
    page = build.write_root_index(["en", "zh_CN"], tmp_path).read_text(encoding="utf-8")
    assert 'href="en/index.html"' in page and 'href="zh_CN/index.html"' in page
    assert "navigator.languages" in page and "zh" in page
    assert "http" not in page


def test_the_training_step_table_shows_the_a_a_check_where_recorded():
    pytest.importorskip("sphinx")
    pytest.importorskip("docutils")
    results = load_module("ln_bench_results", DOCS / "_ext" / "ln_bench_results.py")

    class Page:  # what the method needs of a directive: the English text, fields filled in
        tr = staticmethod(lambda message, **fields: message.format(**fields))
        measured = staticmethod(lambda rows: "")

    def rows(with_aa):
        return [dict(model="gpt", mode="eager", layers="6", width="1024", batch="8", seq="512", amp="bfloat16",
                     norm=norm, ms_p50="10.000", vs_torch_p50=ratio, **({"aa_p50": aa} if with_aa else {}))
                for norm, ratio, aa in (("torch", "1.000", "0.996"), ("ln_tutorial", "0.990", "1.004"))]  # fmt: skip

    table, text, _ = results.HostCost._train_step(Page(), rows(True))
    assert "A/A: torch, ln_tutorial" in table.astext() and "0.996, 1.004" in table.astext()
    assert "second model over its first" in text.astext()
    table, text, _ = results.HostCost._train_step(Page(), rows(False))  # files recorded before the column
    assert "A/A" not in table.astext() + text.astext()


def test_the_compiled_rows_spread_spans_every_training_step_file():
    pytest.importorskip("sphinx")  # the extension is a Sphinx directive, built on docutils
    pytest.importorskip("docutils")
    results = load_module("ln_bench_results", DOCS / "_ext" / "ln_bench_results.py")

    class Page:  # what the method needs of a directive: the English text, fields filled in
        tr = staticmethod(lambda message, **fields: message.format(**fields))

    def steps(ratios, mode="compiled", aa=""):  # one recorded file; aa="" as read from a file without the column
        return results._norms_by_step(
            [dict(model=model, mode=mode, layers="6", width="768", batch="8", seq="512", amp="bfloat16", norm=norm,
                  vs_torch_p50="1.000" if norm == "torch" else ratio, aa_p50=aa)
             for model, ratio in ratios.items() for norm in ("torch", "ln_tutorial")])  # fmt: skip

    spread = results.HostCost._compiled_spread
    files = [steps({"gpt": "0.990", "bert": "1.004"}), steps({"gpt": "1.012"}), steps({"opt": "0.95"}, "eager")]
    [paragraph] = spread(Page(), files)
    assert "from 0.990 to 1.012" in paragraph.astext() and "A/A" not in paragraph.astext()
    files += [steps({"gpt": "1.001"}, aa="0.995"), steps({"opt": "0.99"}, aa="1.003"), steps({"gpt": "1"}, "eager", "0.9")]
    [paragraph] = spread(Page(), files)
    assert "from 0.995 to 1.003 (the A/A columns)" in paragraph.astext()
    assert spread(Page(), [steps({"gpt": "0.990"})]) == []  # one pair: no spread to speak of



def test_generated_sentences_join_as_each_language_writes_them():
    pytest.importorskip("sphinx")  # the extension is a Sphinx directive, built on docutils
    pytest.importorskip("docutils")
    results = load_module("ln_bench_results", DOCS / "_ext" / "ln_bench_results.py")
    assert results._sentences("Ratio: 1.", "A/A: 0.99.") == "Ratio: 1. A/A: 0.99."
    assert results._sentences("比值为 1。", "A/A：0.99。") == "比值为 1。A/A：0.99。"  # no space after a full stop
