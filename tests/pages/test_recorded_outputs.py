"""The gallery pages' outputs recorded on a GPU (``docs/_ext/ln_recorded.py``, ``docs/recorded/``).

* restore: a current record replaces a CPU run's page and figures in the gallery
  folder (figures the record lacks removed); a stale or missing one leaves them;
* stale detection in the build hook: a warning (an error under ``-W``) that names
  the example, unless ``LN_TUTORIAL_ALLOW_STALE_OUTPUTS=1``; a simulated record
  must not be published;
* recording: a run's files and provenance, one example at a time;
* the line on each page, in both editions, and where it goes;
* the archive that carries a record off the GPU machine;
* what ``docs/build.py --gpu-bundle`` carries: every requirement of the wheels;
* the committed record: made on a GPU, complete.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import load_module

pytest.importorskip("sphinx_gallery")
babel = pytest.importorskip("babel")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
recorded = load_module("ln_recorded", DOCS / "_ext" / "ln_recorded.py")
build = load_module("ln_docs_build_recorded", DOCS / "build.py")

GPU_RUN = {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "triton": "3.6.0", "date": "2026-11-28",
           "commit": "0123456789ab", "simulated": False}


def _example(folder: Path, stem: str, page: str, figures: dict[str, bytes], md5: str | None = None) -> None:
    """Gallery-like files of one example in ``folder``."""
    (folder / "images" / "thumb").mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.rst").write_text(page, encoding="utf-8")
    if md5 is not None:
        (folder / f"{stem}.py.md5").write_text(md5, encoding="utf-8")
    for name, data in figures.items():
        (folder / "images" / name).write_bytes(data)
    (folder / "images" / "thumb" / f"sphx_glr_{stem}_thumb.png").write_bytes(b"thumb of " + page.encode())


@pytest.fixture
def tree(tmp_path):
    """A docs folder: a generated script, a gallery holding a CPU run of it, and a GPU record of it."""
    docs = tmp_path / "docs"
    script = docs / "_generated" / "examples" / "01_forward.py"
    script.parent.mkdir(parents=True)
    script.write_text('"""Title\n=====\n"""\nprint("hello")\n', encoding="utf-8")
    gallery, record = docs / "tutorials", docs / "recorded" / "examples"
    md5 = recorded.md5_of(script)
    _example(gallery, "01_forward", "CPU page", {"sphx_glr_01_forward_001.png": b"cpu 1",
                                                 "sphx_glr_01_forward_002.png": b"cpu 2"}, md5)
    _example(record, "01_forward", "GPU page", {"sphx_glr_01_forward_001.png": b"gpu 1",
                                                "sphx_glr_01_forward_001.zh_CN.png": b"gpu 1 zh"}, md5)
    (record / "provenance.json").write_text(json.dumps({"examples": {"01_forward": GPU_RUN}}), encoding="utf-8")
    return SimpleNamespace(docs=docs, script=script, gallery=gallery, record=record)


def test_md5_is_sphinx_gallerys_and_ignores_line_endings(tmp_path):
    from sphinx_gallery.utils import get_md5sum

    unix, dos = tmp_path / "a.py", tmp_path / "b.py"
    unix.write_bytes(b"x = 1\ny = 2\n")
    dos.write_bytes(b"x = 1\r\ny = 2\r\n")
    assert recorded.md5_of(unix) == get_md5sum(unix, mode="t") == hashlib.md5(b"x = 1\ny = 2\n").hexdigest()
    assert recorded.md5_of(dos) == recorded.md5_of(unix)


def test_restore_replaces_the_cpu_run_with_a_current_record(tree):
    states = recorded.restore_record(tree.gallery, tree.record, {"01_forward": tree.script})
    assert states == {"01_forward": "recorded"}
    assert (tree.gallery / "01_forward.rst").read_text() == "GPU page"
    images = tree.gallery / "images"
    assert (images / "sphx_glr_01_forward_001.png").read_bytes() == b"gpu 1"
    assert (images / "sphx_glr_01_forward_001.zh_CN.png").read_bytes() == b"gpu 1 zh"  # translated figures too
    assert not (images / "sphx_glr_01_forward_002.png").exists()  # a figure of the CPU run the GPU run lacks
    assert (images / "thumb" / "sphx_glr_01_forward_thumb.png").read_bytes() == b"thumb of GPU page"


def test_a_changed_script_makes_the_record_stale_and_keeps_the_cpu_run(tree):
    tree.script.write_text(tree.script.read_text() + "print('edited')\n", encoding="utf-8")
    assert recorded.restore_record(tree.gallery, tree.record, {"01_forward": tree.script}) == {"01_forward": "stale"}
    assert (tree.gallery / "01_forward.rst").read_text() == "CPU page"
    assert (tree.gallery / "images" / "sphx_glr_01_forward_002.png").exists()


def test_an_example_without_a_record_is_missing(tree):
    other = tree.script.with_name("02_backward.py")
    other.write_text("print(2)\n")
    states = recorded.restore_record(tree.gallery, tree.record, {"01_forward": tree.script, "02_backward": other})
    assert states == {"01_forward": "recorded", "02_backward": "missing"}


def _app(tree, passing=(), failing=(), language="en"):
    conf = {"plot_gallery": True, "examples_dirs": "_generated/examples", "gallery_dirs": "tutorials",
            "filename_pattern": r"/\d\d_", "passing_examples": [str(p) for p in passing],
            "failing_examples": {str(p): "Traceback" for p in failing}}
    return SimpleNamespace(srcdir=str(tree.docs), config=SimpleNamespace(sphinx_gallery_conf=conf, language=language))


@pytest.fixture
def cpu_build(monkeypatch):
    """The build hook as on a machine without a GPU, none of the variables set."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in (recorded.ALLOW_STALE_VARIABLE, recorded.SIMULATION_VARIABLE, "LN_TUTORIAL_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_build_hook_restores_a_current_record_without_a_warning(tree, cpu_build, caplog):
    app = _app(tree, passing=[tree.script])
    recorded.record_or_restore(app)
    assert app._ln_recorded_pages == {"tutorials/01_forward": ("recorded", GPU_RUN)}
    assert (tree.gallery / "01_forward.rst").read_text() == "GPU page"
    assert not _warnings(caplog)


def test_build_hook_fails_on_a_stale_record_unless_allowed(tree, cpu_build, caplog, capsys):
    tree.script.write_text(tree.script.read_text() + "# edited\n", encoding="utf-8")
    app = _app(tree, passing=[tree.script])
    recorded.record_or_restore(app)
    (message,) = _warnings(caplog)
    assert "01_forward.py (stale)" in message and recorded.ALLOW_STALE_VARIABLE in message
    assert app._ln_recorded_pages["tutorials/01_forward"] == ("stale", GPU_RUN)
    assert (tree.gallery / "01_forward.rst").read_text() == "CPU page"

    caplog.clear()
    cpu_build.setenv(recorded.ALLOW_STALE_VARIABLE, "1")
    recorded.record_or_restore(app)
    assert not _warnings(caplog)
    assert "01_forward.py (stale)" in capsys.readouterr().err  # still named, not an error


def test_build_hook_leaves_a_failing_example_alone(tree, cpu_build, caplog):
    app = _app(tree, failing=[tree.script])
    recorded.record_or_restore(app)
    assert app._ln_recorded_pages == {}  # sphinx-gallery fails the build; the record does not hide it
    assert (tree.gallery / "01_forward.rst").read_text() == "CPU page"


def test_simulated_recording_is_marked_and_never_published(tree, cpu_build, caplog):
    cpu_build.setenv(recorded.SIMULATION_VARIABLE, "1")
    cpu_build.setenv(recorded.COMMIT_VARIABLE, "abc")
    recorded.record_or_restore(_app(tree, passing=[tree.script]))
    run = recorded.load_provenance(tree.record)["01_forward"]
    assert run["simulated"] is True and run["device"].startswith("CPU") and run["commit"] == "abc"
    assert (tree.record / "01_forward.rst").read_text() == "CPU page"
    assert not (tree.record / "images" / "sphx_glr_01_forward_001.zh_CN.png").exists()  # the run had none
    assert not _warnings(caplog)

    cpu_build.delenv(recorded.SIMULATION_VARIABLE)
    cpu_build.setenv("LN_TUTORIAL_BASE_URL", "https://example.org/ln_tutorial/")
    app = _app(tree, passing=[tree.script])
    recorded.record_or_restore(app)
    (message,) = _warnings(caplog)
    assert "simulated" in message and "01_forward" in message


def test_recording_one_example_keeps_the_others(tree):
    other = {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "triton": "3.6.0", "date": "2026-11-29",
             "commit": "fedcba987654", "simulated": False}
    _example(tree.gallery, "02_backward", "page 2", {"sphx_glr_02_backward_001.png": b"2"}, "md5 of 2")
    recorded.write_record(tree.gallery, tree.record, ["02_backward"], other)
    assert recorded.load_provenance(tree.record) == {"01_forward": GPU_RUN, "02_backward": other}
    assert sorted(str(p) for p in recorded.example_files(tree.record, "02_backward")) == [
        "02_backward.py.md5", "02_backward.rst", "images/sphx_glr_02_backward_001.png",
        "images/thumb/sphx_glr_02_backward_thumb.png"]
    assert (tree.record / "01_forward.rst").read_text() == "GPU page"


# -- the line on each page ------------------------------------------------------------------
def test_provenance_line_names_gpu_versions_date_and_commit():
    line = recorded.outputs_line("recorded", GPU_RUN, "en", built_on_gpu=False)
    for field in GPU_RUN.values():
        if isinstance(field, str):
            assert field in line
    assert "without a GPU" in line and "as a check" in line
    assert "without a GPU" not in recorded.outputs_line("recorded", GPU_RUN, "en", built_on_gpu=True)
    assert "this build's run on NVIDIA H100" in recorded.outputs_line("live", GPU_RUN, "en")
    simulated = dict(GPU_RUN, simulated=True)
    assert "simulated" in recorded.outputs_line("recorded", simulated, "en")
    assert "simulated" in recorded.outputs_line("live", simulated, "en")
    stale = recorded.outputs_line("stale", GPU_RUN, "en")
    assert "interpreter" in stale and "changed after" in stale and GPU_RUN["commit"] in stale
    assert "no outputs recorded" in recorded.outputs_line("missing", None, "en")


def test_provenance_line_in_chinese():
    line = recorded.outputs_line("recorded", GPU_RUN, "zh_CN")
    assert re.search(r"[\u4e00-\u9fff]", line) and "记录" in line and "解释器" in line
    for field in ("device", "torch", "triton", "date", "commit"):
        assert GPU_RUN[field] in line


def test_every_message_is_translated_with_its_placeholders():
    from babel.messages.pofile import read_po

    po = recorded.CATALOG_DIR / "zh_CN" / "LC_MESSAGES" / f"{recorded.DOMAIN}.po"
    with po.open("rb") as f:
        catalog = {m.id: m.string for m in read_po(f) if m.id}
    source = (DOCS / "_ext" / "ln_recorded.py").read_text(encoding="utf-8")
    assert len(recorded.MESSAGES) == source.count(" = _(")  # every marked message is listed
    for message in recorded.MESSAGES:
        assert catalog.get(message), f"untranslated: {message}"
        assert sorted(re.findall(r"\{\w+\}", catalog[message])) == sorted(re.findall(r"\{\w+\}", message))
    assert set(catalog) == set(recorded.MESSAGES), "messages no longer used"


def test_the_line_goes_into_the_box_at_the_top_of_the_page():
    from docutils import nodes

    def doctree():
        doc = nodes.document(None, None)
        box = nodes.note(classes=["sphx-glr-download-link-note"])
        box += nodes.paragraph(text="Go to the end to download the full example code.")
        section = nodes.section()
        section += nodes.title(text="Title")
        section += nodes.paragraph(text="Prose.")
        doc += [box, section]
        return doc, box, section

    app = SimpleNamespace(_ln_recorded_pages={"tutorials/01_forward": ("recorded", GPU_RUN)},
                          builder=SimpleNamespace(format="html"), config=SimpleNamespace(language="zh_CN"),
                          _ln_built_on_gpu=False)
    doc, box, section = doctree()
    recorded.add_outputs_line(app, doc, "tutorials/01_forward")
    assert "ln-outputs-note" in box[-1]["classes"] and "记录" in box[-1].astext()
    doc, box, section = doctree()
    recorded.add_outputs_line(app, doc, "installation")  # not a gallery page
    recorded.add_outputs_line(SimpleNamespace(**{**vars(app), "builder": SimpleNamespace(format="text")}),
                              doc, "tutorials/01_forward")  # gettext and other builders: no line
    assert len(box) == 1 and len(section) == 2


# -- carrying a record -------------------------------------------------------------------------
def test_archive_round_trip_replaces_whole_folders(tree, tmp_path):
    archive = tmp_path / "recorded.tar.gz"
    recorded.archive_records(tree.docs, ["examples"], archive)
    stray = tree.record / "images" / "sphx_glr_01_forward_009.png"
    stray.write_bytes(b"an old figure")
    (tree.record / "01_forward.rst").write_text("changed here")
    assert recorded.unpack_records(tree.docs, archive) == ["examples"]
    assert (tree.record / "01_forward.rst").read_text() == "GPU page"
    assert not stray.exists()


def test_unpack_refuses_paths_outside_the_record(tree, tmp_path):
    archive = tmp_path / "evil.tar.gz"
    outside = tmp_path / "payload"
    outside.write_text("x")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(outside, arcname="docs/recorded/../../payload")
    with pytest.raises(ValueError, match="not a file of a record folder"):
        recorded.unpack_records(tree.docs, archive)


def test_gpu_bundle_holds_every_requirement_of_its_wheels():
    """What --record needs beyond the GPU machine's packages: each requirement of a bundled
    package (on Linux, Python 3.12, no extra) is bundled or on that machine."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    have = {canonicalize_name(n) for n in build.GPU_BUNDLE + build.GPU_HAS}
    environment = {"sys_platform": "linux", "platform_system": "Linux", "python_version": "3.12",
                   "python_full_version": "3.12.3", "implementation_name": "cpython", "extra": ""}
    missing = []
    for name in build.GPU_BUNDLE:
        for text in requires(name) or []:
            req = Requirement(text)
            if (req.marker is None or req.marker.evaluate(environment)) and canonicalize_name(req.name) not in have:
                missing.append(f"{name} needs {req.name}")
    assert not missing
    for module in ("sphinx", "sphinx_gallery", "myst_parser", "docutils", "babel"):  # what --record imports
        assert canonicalize_name(module.replace("_", "-")) in have


def test_cjk_font_characters_cover_the_catalogs():
    chars = set(build.cjk_characters())
    assert {"层", "归", "一", "化", "，"} <= chars
    for po in (DOCS / "locale" / "zh_CN").rglob("*.po"):
        assert {c for c in po.read_text(encoding="utf-8") if ord(c) > 0x7F} <= chars, po


# -- the committed record -------------------------------------------------------------------------
RECORDS = sorted(p.parent for p in (DOCS / recorded.RECORD_DIR).glob(f"*/{recorded.PROVENANCE}"))


def test_the_record_is_committed_for_every_edition():
    """The gallery of each edition is run from docs/_generated/examples (English) or a translated
    copy (examples_<lang>, where the language has code catalogs): each needs its record."""
    wanted = ["examples"] + [f"examples_{p.parent.name}" for p in sorted((DOCS / "locale").glob("*/code"))
                             if any(p.glob("*.po"))]
    assert [p.name for p in RECORDS] == wanted, "record the outputs on a GPU: docs/recorded/README.md"


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: p.name)
def test_the_committed_record_is_a_complete_gpu_run(record):
    runs = recorded.load_provenance(record)
    examples = sorted(p.stem for p in (ROOT / "examples").glob("[0-9][0-9]_*.py"))
    assert sorted(runs) == examples
    for stem, run in runs.items():
        assert not run["simulated"] and not run["device"].startswith("CPU"), f"{stem}: a simulated (CPU) record"
        assert all(run[k] for k in ("device", "torch", "triton", "date", "commit")), stem
        assert (record / f"{stem}.rst").is_file() and re.fullmatch(r"[0-9a-f]{32}", (record / f"{stem}.py.md5").read_text())
        page = (record / f"{stem}.rst").read_text(encoding="utf-8")
        for image in re.findall(r"/tutorials/(images/\S+\.png)", page):
            assert (record / image).is_file(), f"{stem}: {image} is not recorded"
        outputs = re.findall(r"\.\. rst-class:: sphx-glr-script-out\n\n(?:[ \t]+.*\n|\n)+", page)
        assert outputs, f"{stem}: no recorded output"
        assert not any("No CUDA GPU found" in out for out in outputs), f"{stem}: an interpreter run's output"
    size = sum(p.stat().st_size for p in record.rglob("*") if p.is_file())
    assert size < 4 * 2**20, f"{record.name}: {size / 2**20:.1f} MiB"
