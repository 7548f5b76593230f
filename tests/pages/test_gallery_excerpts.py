"""Excerpt markers of ``docs/_ext/ln_gallery.py``: a function shown in part.

``# ln_tutorial:source module.function from "A" to "B"`` shows the function's
decorators and ``def`` line, then its body from the one line containing ``A`` to
the first line from there containing ``B`` (without ``to``, to the end), with
``...`` for the lines left out.
"""

import textwrap
from pathlib import Path

import pytest

from helpers import load_module

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("[0-9][0-9]_*.py"))

ln_gallery = load_module("ln_gallery", ROOT / "docs" / "_ext" / "ln_gallery.py")

DEMO = textwrap.dedent('''\
    import functools


    @functools.lru_cache(maxsize=None)
    def demo(first_argument_with_a_long_name, second_argument_with_a_long_name, third: int = 3,
             fourth: "str" = "x"):
        """A docstring that the excerpt leaves out."""
        total = 0
        for i in range(third):
            total += i
        if total > 2:
            total -= 1
        result = total * 2
        return result


    VALUE = 1
''')


@pytest.fixture
def demo_package(tmp_path, monkeypatch):
    package = tmp_path / "excerpt_demo_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text(DEMO)
    monkeypatch.syspath_prepend(str(tmp_path))
    return package


def test_an_excerpt_shows_the_def_line_and_the_chosen_lines(demo_package):
    text = ln_gallery.expand_text('# ln_tutorial:source excerpt_demo_pkg.mod.demo from "for i in" to "total -= 1"\n')
    lines = text.splitlines()
    assert lines[0].startswith("# From excerpt_demo_pkg/mod.py: part of the package's own demo")
    assert lines[1] == "@functools.lru_cache(maxsize=None)"
    header = " ".join(line.strip() for line in lines[2:4])
    assert header == ("def demo(first_argument_with_a_long_name, second_argument_with_a_long_name, "
                      "third: int=3, fourth: 'str'='x'):")
    assert all(len(line) <= 100 for line in lines[1:])
    assert lines[4:] == ["    ...", "    for i in range(third):", "        total += i",
                         "    if total > 2:", "        total -= 1", "    ..."]
    compile(text, "excerpt", "exec")
    assert not ln_gallery.MARKER.search(text) and "ln_tutorial:source" not in text


def test_without_to_an_excerpt_runs_to_the_end_of_the_function(demo_package):
    text = ln_gallery.expand_text('# ln_tutorial:source excerpt_demo_pkg.mod.demo from "result = total"\n')
    assert text.splitlines()[-3:] == ["    ...", "    result = total * 2", "    return result"]


def test_consecutive_markers_are_two_blank_lines_apart(demo_package):
    text = ln_gallery.expand_text('# ln_tutorial:source excerpt_demo_pkg.mod.demo from "return result"\n'
                                  "# ln_tutorial:source excerpt_demo_pkg.mod.VALUE\n")
    assert "    return result\n\n\n# From excerpt_demo_pkg/mod.py" in text


@pytest.mark.parametrize("marker", [
    'excerpt_demo_pkg.mod.demo from "no such line"',  # no line
    'excerpt_demo_pkg.mod.demo from "total"',  # several lines
    'excerpt_demo_pkg.mod.demo from "result = total" to "no such line"',  # no end
    'excerpt_demo_pkg.mod.demo from "total += i"',  # starts inside a block: not valid Python
    'excerpt_demo_pkg.mod.VALUE from "1"',  # not a function
])
def test_an_excerpt_that_does_not_match_fails_loudly(demo_package, marker):
    with pytest.raises(LookupError):
        ln_gallery.expand_text(f"# ln_tutorial:source {marker}\n")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_examples_excerpts_are_the_current_source(path):
    """Every line an excerpt shows, apart from its def line and its ``...``, is a line of the package's source."""
    for match in ln_gallery.EXCERPT.finditer(path.read_text(encoding="utf-8")):
        excerpt, source_file = ln_gallery.object_excerpt(match["target"], match["start"], match["end"])
        source = ln_gallery.object_source(match["target"])[0].splitlines()
        body = excerpt.splitlines()
        first = next(i for i, line in enumerate(body) if line.endswith("):"))
        shown = [line for line in body[first + 1:] if line.strip() != "..."]
        start = source.index(shown[0])
        assert source[start:start + len(shown)] == shown, f"{match['target']}: not a run of its source lines"
        assert match["start"] in shown[0] and (match["end"] is None or match["end"] in shown[-1])
