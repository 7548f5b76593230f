"""The tutorial pages show what their code printed and drew on a GPU, also in a site built without one.

sphinx-gallery runs every example while it writes the gallery (``builder-inited``)
and keeps what it wrote in the gallery directory (``docs/tutorials/``): the page
with its outputs (``<name>.rst``), the figures (``images/sphx_glr_<name>_*.png``,
also the translated copies ``*.zh_CN.png`` where an edition makes them), the
thumbnail and the md5 of the script it ran (``<name>.py.md5``). This extension
keeps those files of a GPU run in ``docs/recorded/<examples>/`` (``<examples>``:
the name of the folder sphinx-gallery read the scripts from, ``examples`` or a
translated ``examples_<lang>``), with ``provenance.json``: per example the GPU,
the torch and Triton versions, the date and the commit of the run.

After sphinx-gallery has written the gallery, for every example:

* run here on a GPU (or, with ``LN_TUTORIAL_RECORD_SIMULATION=1``, on a CPU,
  marked as a simulation): its files replace its record. The page shows this
  run's outputs.
* otherwise (a build without a GPU: the example ran through Triton's
  interpreter as a check, or was not run at all): when the record's md5 is the
  md5 of the script as it is now, the recorded files replace this run's in the
  gallery directory, and the page shows the GPU's outputs. When it is not (the
  example, or package source it shows, changed after the recording) or there
  is no record, the record is *stale*: the page keeps this build's own outputs
  and says so, and the build warns (an error under ``-W``), naming the stale
  examples, unless ``LN_TUTORIAL_ALLOW_STALE_OUTPUTS=1``.

Every gallery page says in one line where its outputs come from (the
``doctree-resolved`` event, after translation: the line changes with every
recording and is no message of the page catalogs; its own messages are
translated from ``docs/_ext/locale/<lang>/LC_MESSAGES/ln_recorded.po``).

A simulated record must not be published: a build with ``LN_TUTORIAL_BASE_URL``
set (the Pages workflow) warns when it would show one.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

#: docs/recorded/: one folder per examples folder, named like it.
RECORD_DIR = "recorded"
PROVENANCE = "provenance.json"
ALLOW_STALE_VARIABLE = "LN_TUTORIAL_ALLOW_STALE_OUTPUTS"
SIMULATION_VARIABLE = "LN_TUTORIAL_RECORD_SIMULATION"
#: The commit of the recorded run where the checkout has no .git (a copy of the tree).
COMMIT_VARIABLE = "LN_TUTORIAL_COMMIT"
CATALOG_DIR = Path(__file__).resolve().parent / "locale"
DOMAIN = "ln_recorded"
_DOCS = Path(__file__).resolve().parents[1]


def _(message: str) -> str:
    """Mark a message for this extension's catalog (translated in :func:`outputs_line`)."""
    return message


M_RECORDED = _("The outputs on this page were recorded on {device} with torch {torch} and Triton {triton} "
               "on {date} (commit {commit}).")
M_CHECKED = _("This site was built without a GPU: it ran the code below through Triton's interpreter only "
              "as a check, and shows the recorded outputs.")
M_LIVE = _("The outputs on this page come from this build's run on {device} with torch {torch} and "
           "Triton {triton} on {date} (commit {commit}).")
M_SIMULATED = _("The outputs on this page come from a simulated recording: a run on a CPU through Triton's "
                "interpreter, not on a GPU, with torch {torch} and Triton {triton} on {date} (commit {commit}).")
M_STALE = _("The outputs on this page come from a run on a CPU through Triton's interpreter: the code below "
            "changed after its outputs were recorded on a GPU ({date}, commit {commit}).")
M_MISSING = _("The outputs on this page come from a run on a CPU through Triton's interpreter: the code below "
              "has no outputs recorded on a GPU yet.")
MESSAGES = [M_RECORDED, M_CHECKED, M_LIVE, M_SIMULATED, M_STALE, M_MISSING]


# -- the files of one example ------------------------------------------------------
def md5_of(script: Path) -> str:
    """The md5 sphinx-gallery keys an example's outputs on (text mode: line endings do not count)."""
    from sphinx_gallery.utils import get_md5sum

    return get_md5sum(script, mode="t")


def example_files(folder: Path, stem: str) -> list[Path]:
    """The files of example ``stem`` in a gallery or record folder, relative to it: page, md5, figures."""
    folder = Path(folder)
    found = [Path(f"{stem}.rst"), Path(f"{stem}.py.md5")]
    found += sorted(p.relative_to(folder) for p in (folder / "images").glob(f"sphx_glr_{stem}_[0-9]*.png"))
    found.append(Path("images") / "thumb" / f"sphx_glr_{stem}_thumb.png")
    return [p for p in found if (folder / p).is_file()]


def _copy_example(src: Path, dst: Path, stem: str) -> None:
    """Make ``dst``'s files of example ``stem`` those of ``src`` (figures of ``dst`` not in ``src`` removed)."""
    for rel in example_files(dst, stem):
        if rel.suffix == ".png" and not (src / rel).is_file():
            (dst / rel).unlink()
    for rel in example_files(src, stem):
        target = dst / rel
        if target.is_file() and target.read_bytes() == (src / rel).read_bytes():
            continue  # unchanged: keep its mtime (Sphinx rereads a page whose file is newer)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, target)


def load_provenance(record: Path) -> dict:
    """``{stem: provenance}`` of a record folder (empty when there is none)."""
    path = Path(record) / PROVENANCE
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))["examples"]


def _commit() -> str:
    commit = os.environ.get(COMMIT_VARIABLE, "").strip()
    if commit:
        return commit
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=_DOCS,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):  # a copy of the tree without .git
        return "unknown"


def run_provenance(simulated: bool = False) -> dict:
    """Where this process runs the examples: the GPU (or the CPU), versions, date (UTC), commit."""
    import torch
    import triton

    on_gpu = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name() if on_gpu else "CPU (Triton interpreter)",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "commit": _commit(),
        "simulated": bool(simulated or not on_gpu),
    }


def write_record(gallery: Path, record: Path, stems: list[str], provenance: dict) -> None:
    """Record examples ``stems`` of ``gallery`` (just run) in ``record`` with ``provenance``."""
    record.mkdir(parents=True, exist_ok=True)
    known = load_provenance(record)
    for stem in stems:
        _copy_example(gallery, record, stem)
        known[stem] = dict(provenance)
    text = json.dumps({"examples": dict(sorted(known.items()))}, indent=2, ensure_ascii=False) + "\n"
    (record / PROVENANCE).write_text(text, encoding="utf-8")


def restore_record(gallery: Path, record: Path, scripts: dict[str, Path]) -> dict[str, str]:
    """Copy the record of every example whose md5 is current into ``gallery``.

    ``scripts``: ``{stem: the script sphinx-gallery ran}``. Returns ``{stem: state}``,
    state ``"recorded"`` (restored), ``"stale"`` (recorded from another version of
    the script) or ``"missing"`` (never recorded); the last two keep ``gallery``'s files.
    """
    known = load_provenance(record)
    states = {}
    for stem, script in sorted(scripts.items()):
        md5 = record / f"{stem}.py.md5"
        if stem not in known or not md5.is_file() or not (record / f"{stem}.rst").is_file():
            states[stem] = "missing"
        elif md5.read_text(encoding="utf-8").strip() != md5_of(script):
            states[stem] = "stale"
        else:
            _copy_example(record, gallery, stem)
            states[stem] = "recorded"
    return states


def record_stamps(docs: Path = _DOCS) -> dict[str, str]:
    """``{record folder name: its provenance.json's text}``: what changes when a run records into it."""
    root = Path(docs) / RECORD_DIR
    if not root.is_dir():
        return {}
    return {p.parent.name: p.read_text(encoding="utf-8") for p in sorted(root.glob(f"*/{PROVENANCE}"))}


def archive_records(docs: Path, names: list[str], archive: Path) -> None:
    """Pack the record folders ``names`` into ``archive`` (.tar.gz), paths relative to the repository."""
    import tarfile

    docs = Path(docs)
    with tarfile.open(archive, "w:gz") as tar:
        for name in names:
            folder = docs / RECORD_DIR / name
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                tar.add(path, arcname=path.relative_to(docs.parent).as_posix(), recursive=False)


def unpack_records(docs: Path, archive: Path) -> list[str]:
    """Replace the record folders that ``archive`` holds (each wholly: files it lacks are removed)."""
    import tarfile

    docs = Path(docs)
    prefix = f"{docs.name}/{RECORD_DIR}/"
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        names = set()
        for member in members:
            parts = member.name.split("/")
            if not (member.isfile() and member.name.startswith(prefix) and len(parts) >= 4
                    and re.fullmatch(r"[\w.-]+", parts[2]) and not {"", ".", ".."} & set(parts)):
                raise ValueError(f"{archive}: {member.name!r} is not a file of a record folder ({prefix}<name>/...)")
            names.add(parts[2])
        for name in sorted(names):
            shutil.rmtree(docs / RECORD_DIR / name, ignore_errors=True)
        for member in members:
            target = docs.parent / member.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())
    return sorted(names)


def record_status(docs: Path = _DOCS) -> list[str]:
    """Lines that describe every record folder: its size, and per example the run and whether it is current
    (compared with the scripts last generated in ``docs/_generated/``)."""
    lines = []
    for record in sorted(p.parent for p in (Path(docs) / RECORD_DIR).glob(f"*/{PROVENANCE}")):
        size = sum(p.stat().st_size for p in record.rglob("*") if p.is_file())
        lines.append(f"{record.relative_to(Path(docs).parent)}/ ({size / 2**20:.2f} MiB):")
        generated = Path(docs) / "_generated" / record.name
        known = load_provenance(record)
        scripts = {p.stem: p for p in generated.glob("*.py")} if generated.is_dir() else {}
        for stem in sorted(set(known) | {s for s in scripts if re.match(r"\d\d_", s)}):
            if stem not in known:
                lines.append(f"  {stem}: not recorded")
                continue
            run = known[stem]
            figures = [p.name for p in (record / "images").glob(f"sphx_glr_{stem}_[0-9]*.png")]
            translated = sum(".zh_CN." in name for name in figures)
            md5 = record / f"{stem}.py.md5"
            if stem not in scripts:
                state = "not compared (no generated script: build first)"
            elif md5.is_file() and md5.read_text(encoding="utf-8").strip() == md5_of(scripts[stem]):
                state = "current"
            else:
                state = "STALE"
            lines.append(f"  {stem}: {run['device']}{' (SIMULATION)' if run.get('simulated') else ''}, "
                         f"torch {run['torch']}, Triton {run['triton']}, {run['date']}, commit {run['commit']}; "
                         f"{len(figures) - translated} figure(s)"
                         + (f" + {translated} zh_CN" if translated else "") + f": {state}")
    return lines or [f"no record in {Path(docs) / RECORD_DIR}"]


def stale_message(stale: dict[str, str], record: Path, language: str, allowed: bool = False) -> str:
    """The build's message for examples whose record is stale or missing (``allowed``: the opt-in is set)."""
    names = ", ".join(f"{stem}.py ({state})" for stem, state in sorted(stale.items()))
    try:
        where = Path(record).relative_to(_DOCS.parent)
    except ValueError:
        where = record
    head = (f"[ln_recorded] no current GPU outputs for {names} in {where}/ (the {language} edition): "
            "the script changed after its outputs were recorded, or they never were")
    if allowed:
        return f"{head}; their pages show this build's own outputs ({ALLOW_STALE_VARIABLE} is set)."
    return (f"{head}. Record them again with a GPU build (see docs/recorded/README.md), or set "
            f"{ALLOW_STALE_VARIABLE}=1 to build these pages with this build's own outputs, which they then name.")


# -- the line on each page -----------------------------------------------------------
_CATALOGS: dict[str, dict[str, str]] = {}


def load_catalog(language: str | None) -> dict[str, str]:
    """msgid -> msgstr of this extension's catalog for ``language`` (translated, not fuzzy)."""
    if not language or language == "en":
        return {}
    if language not in _CATALOGS:
        path = CATALOG_DIR / language / "LC_MESSAGES" / f"{DOMAIN}.po"
        _CATALOGS[language] = {}
        if path.exists():
            from babel.messages.pofile import read_po

            with path.open("rb") as f:
                _CATALOGS[language] = {m.id: m.string for m in read_po(f) if m.id and m.string and not m.fuzzy}
    return _CATALOGS[language]


def outputs_line(state: str, provenance: dict | None, language: str = "en", built_on_gpu: bool = False) -> str:
    """The page's line: where its outputs come from.

    ``state``: ``"live"`` (run in this build and recorded), ``"recorded"``,
    ``"stale"`` or ``"missing"``; ``provenance`` of the run shown (``"live"``,
    ``"recorded"``) or of the stale record.
    """
    catalog = load_catalog(language)

    def tr(message: str) -> str:
        return catalog.get(message, message)

    fields = dict(provenance or {})
    if state in ("live", "recorded") and fields.get("simulated"):
        return tr(M_SIMULATED).format(**fields)
    if state == "live":
        return tr(M_LIVE).format(**fields)
    if state == "recorded":
        line = tr(M_RECORDED).format(**fields)
        if not built_on_gpu:
            line += (" " if language == "en" else "") + tr(M_CHECKED)
        return line
    if state == "stale":
        return tr(M_STALE).format(**fields)
    return tr(M_MISSING)


# -- Sphinx hooks ----------------------------------------------------------------------
def _galleries(conf: dict) -> list[tuple[Path, Path]]:
    examples, galleries = conf["examples_dirs"], conf["gallery_dirs"]
    examples = [examples] if isinstance(examples, str) else list(examples)
    galleries = [galleries] if isinstance(galleries, str) else list(galleries)
    return list(zip(examples, galleries))


def record_or_restore(app) -> None:
    """``builder-inited``, after sphinx-gallery has run the examples: record or restore their outputs."""
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    conf = app.config.sphinx_gallery_conf
    pages: dict[str, tuple[str, dict | None]] = {}
    app._ln_recorded_pages = pages
    if not conf.get("plot_gallery"):
        return  # rendered without running (the gettext templates): nothing to record or show
    import torch

    on_gpu = torch.cuda.is_available()
    simulate = os.environ.get(SIMULATION_VARIABLE, "") not in ("", "0")
    allow_stale = os.environ.get(ALLOW_STALE_VARIABLE, "") not in ("", "0")
    publishing = bool(os.environ.get("LN_TUTORIAL_BASE_URL", "").strip())
    srcdir = Path(app.srcdir)
    ran = {Path(p).resolve() for p in conf.get("passing_examples", [])}
    failed = {Path(p).resolve() for p in conf.get("failing_examples", {})}
    for examples_dir, gallery_dir in _galleries(conf):
        examples, gallery = srcdir / examples_dir, srcdir / gallery_dir
        record = srcdir / RECORD_DIR / Path(examples_dir).name
        scripts = {p.stem: p for p in sorted(examples.glob("*.py"))
                   if re.search(conf["filename_pattern"], os.path.normpath(p))}
        just_ran = [s for s, p in scripts.items() if p.resolve() in ran]
        if (on_gpu or simulate) and just_ran:
            provenance = run_provenance(simulated=not on_gpu)
            write_record(gallery, record, just_ran, provenance)
            print(f"[ln_recorded] recorded {', '.join(just_ran)} in {record}"
                  + (" (a SIMULATION on the CPU: never commit it)" if not on_gpu else ""), file=sys.stderr)
            pages.update({f"{gallery_dir}/{s}": ("live", provenance) for s in just_ran})
        rest = {s: p for s, p in scripts.items() if f"{gallery_dir}/{s}" not in pages and p.resolve() not in failed}
        states = restore_record(gallery, record, rest)
        known = load_provenance(record)
        for stem, state in states.items():
            pages[f"{gallery_dir}/{stem}"] = (state, known.get(stem))
        stale = {s: state for s, state in states.items() if state != "recorded"}
        if stale:
            message = stale_message(stale, record, str(app.config.language), allow_stale)
            if allow_stale:
                print(message, file=sys.stderr)
            else:
                logger.warning(message)
        shown_simulated = sorted(s for s, state in states.items()
                                 if state == "recorded" and known.get(s, {}).get("simulated"))
        if publishing and shown_simulated:
            logger.warning("[ln_recorded] %s would publish a simulated (CPU) record as the outputs of %s: "
                           "record them on a GPU first", record, ", ".join(shown_simulated))
    app._ln_built_on_gpu = on_gpu


def add_outputs_line(app, doctree, docname: str) -> None:
    """``doctree-resolved``: the line that says where the page's outputs come from, at the top of the page."""
    from docutils import nodes

    entry = getattr(app, "_ln_recorded_pages", {}).get(docname)
    if entry is None or app.builder.format != "html":
        return
    text = outputs_line(entry[0], entry[1], str(app.config.language), getattr(app, "_ln_built_on_gpu", False))
    line = nodes.paragraph(text, text, classes=["ln-outputs-note"])
    # In the box at the top of a gallery page ("Go to the end to download ..."), else after the title.
    for box in doctree.findall(nodes.Element):
        if "sphx-glr-download-link-note" in box.get("classes", []):
            box.append(line)
            return
    for section in doctree.findall(nodes.section):
        section.insert(1, line)
        return


def setup(app):
    # After sphinx-gallery's generate_gallery_rst (priority 500), before Sphinx reads the pages.
    app.connect("builder-inited", record_or_restore, priority=600)
    app.connect("doctree-resolved", add_outputs_line)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
