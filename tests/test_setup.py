"""The set-up and the publishing: what a newcomer and the hosted site rely on.

* ``toxfile.py``: a tox environment imports the torch of the Python that runs tox
  and installs no copy of a package that Python already has.
* ``docs/build.py``: the 404 page, the sitemap, canonical links that are no
  remote resource.
* ``.github/workflows/``: least permissions, actions pinned to a commit, no
  untrusted code with write access, the Pages build runs the README's command,
  every workflow is validated by ``tox -e workflows``.
* The README's set-up block, and the ``examples`` extra against what the
  tutorial scripts import.
"""

import ast
import os
import re
import subprocess
import sys
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from helpers import load_module

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
build = load_module("ln_docs_build_setup", ROOT / "docs" / "build.py")


def readme_setup_lines() -> list[str]:
    """The README's block after "<!-- newcomer" (what .ci/newcomer runs)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^<!-- newcomer.*?\n```\w*\n(.*?)^```", text, re.M | re.S)
    assert block, "README.md has no <!-- newcomer --> block"
    return block.group(1).strip().splitlines()


# --- toxfile.py ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def toxfile():
    pytest.importorskip("tox")
    return load_module("ln_toxfile", ROOT / "toxfile.py")


def test_tox_environment_uses_the_runners_packages(tmp_path, toxfile):
    """A real tox run: the environment's torch is this Python's, and pip keeps this Python's pytest."""
    import torch

    (tmp_path / "toxfile.py").write_text((ROOT / "toxfile.py").read_text(encoding="utf-8"))
    (tmp_path / "tox.ini").write_text(
        "[testenv:probe]\nskip_install = true\ndeps = pytest\n"
        "commands = python -c \"import torch; print('TORCH=' + torch.__file__)\"\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOX")}
    run = subprocess.run([sys.executable, "-m", "tox", "-e", "probe", "--workdir", str(tmp_path / "w")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"TORCH={torch.__file__}" in run.stdout
    own = [p.name for p in (tmp_path / "w" / "probe").glob("lib/python*/site-packages/*")]
    assert toxfile.PTH_NAME in own
    assert not [name for name in own if name.lower().startswith(("pytest", "torch"))], own


def test_pth_file_reads_each_site_directory(toxfile):
    dirs = toxfile.runner_site_dirs()
    assert dirs and all(Path(d).is_dir() for d in dirs)
    assert toxfile.pth_text(["/a b/site-packages"]) == "import site; site.addsitedir('/a b/site-packages')\n"


def test_another_python_version_gets_no_runner_packages(toxfile):
    same = types.SimpleNamespace(implementation=sys.implementation.name.title(), version_info=sys.version_info)
    other = types.SimpleNamespace(implementation=same.implementation,
                                  version_info=(sys.version_info[0], sys.version_info[1] + 1))
    assert toxfile.same_interpreter(same)
    assert not toxfile.same_interpreter(other)


# --- docs/build.py: hosting files -------------------------------------------------------------
def test_not_found_page_links_are_absolute(tmp_path):
    page = build.write_not_found(["en", "zh_CN"], "https://octo.github.io/ln_tutorial/", tmp_path).read_text()
    assert 'href="/ln_tutorial/en/index.html"' in page and 'href="/ln_tutorial/zh_CN/index.html"' in page
    page = build.write_not_found(["en"], "", tmp_path).read_text()
    assert 'href="/en/index.html"' in page


def test_sitemap_lists_pages_with_their_translations(tmp_path):
    for page in ["en/index.html", "en/tutorials/01_forward.html", "en/search.html", "en/_static/x.html",
                 "zh_CN/index.html"]:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text("<html></html>")
    url = "https://octo.github.io/ln_tutorial/"
    root = ET.parse(build.write_sitemap(["en", "zh_CN"], url, tmp_path)).getroot()
    ns = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9", "x": "http://www.w3.org/1999/xhtml"}
    entries = {
        u.find("s:loc", ns).text: {a.get("hreflang"): a.get("href") for a in u.findall("x:link", ns)}
        for u in root.findall("s:url", ns)
    }
    assert set(entries) == {url + "en/index.html", url + "en/tutorials/01_forward.html", url + "zh_CN/index.html"}
    assert entries[url + "en/index.html"] == {"en": url + "en/index.html", "zh-CN": url + "zh_CN/index.html"}
    assert entries[url + "en/tutorials/01_forward.html"] == {"en": url + "en/tutorials/01_forward.html"}


def test_canonical_link_is_no_remote_resource(tmp_path):
    (tmp_path / "a.html").write_text('<link rel="canonical" href="https://octo.github.io/x/en/a.html" />'
                                     '<link rel="stylesheet" href="https://cdn.example/x.css" />')
    assert [f for f in build.remote_resources(tmp_path) if "canonical" in f] == []
    assert len(build.remote_resources(tmp_path)) == 1


def test_base_url_from_the_environment(monkeypatch):
    monkeypatch.setenv(build.BASE_URL_VARIABLE, " https://octo.github.io/ln_tutorial ")
    assert build.base_url() == "https://octo.github.io/ln_tutorial/"
    monkeypatch.delenv(build.BASE_URL_VARIABLE)
    assert build.base_url() == ""


# --- the workflows ---------------------------------------------------------------------------
def _workflow(path: Path) -> dict:
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def _triggers(wf: dict) -> dict:
    on = wf["on"]
    return {name: None for name in on} if isinstance(on, list) else dict(on)


def test_there_are_workflows():
    assert {p.name for p in WORKFLOWS} >= {"pages.yml", "pages-gpu.yml", "ci.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_actions_are_pinned_to_a_commit(path):
    uses = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if re.match(r"\s*(- )?uses:", line)]
    assert uses
    for line in uses:
        assert re.fullmatch(r"(- )?uses: [\w.-]+/[\w.-]+@[0-9a-f]{40}\s+# v\d+\.\d+\.\d+", line), line


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_least_permissions(path):
    wf = _workflow(path)
    assert wf["permissions"] == {"contents": "read"}, "read-only by default"
    for name, job in wf["jobs"].items():
        writes = {k for k, v in job.get("permissions", {}).items() if v == "write"}
        if writes:
            assert writes <= {"pages", "id-token"}, f"{name}: {writes}"
            assert any("actions/deploy-pages@" in step.get("uses", "") for step in job["steps"]), name
            assert len(job["steps"]) == 1, f"{name}: a job that may write runs nothing but the deployment"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_pull_requests_never_get_write_access(path):
    wf = _workflow(path)
    triggers = _triggers(wf)
    assert "pull_request_target" not in triggers and "workflow_run" not in triggers
    deploys = any("permissions" in job and "pages" in job["permissions"] for job in wf["jobs"].values())
    if deploys:
        assert set(triggers) <= {"push", "workflow_dispatch", "schedule"}, triggers
        assert (triggers.get("push") or {}).get("branches", ["main"]) == ["main"]
    if "pull_request" in triggers:
        for job in wf["jobs"].values():
            assert "self-hosted" not in str(job["runs-on"])
            assert "write" not in job.get("permissions", {}).values()


def test_pages_builds_with_the_readme_command():
    lines = readme_setup_lines()
    for name in ["pages.yml", "pages-gpu.yml"]:
        build_job = _workflow(ROOT / ".github" / "workflows" / name)["jobs"]["build"]
        steps = {step.get("name"): step for step in build_job["steps"]}
        command = steps["Build both editions"]["run"].strip()
        assert command.removeprefix("python -m ") in lines, f"{name}: {command!r} is not a README line"
        assert steps["Build both editions"]["env"]["LN_TUTORIAL_BASE_URL"] == "${{ steps.pages.outputs.base_url }}"
        upload = [s for s in build_job["steps"] if "upload-pages-artifact" in s.get("uses", "")]
        assert upload and upload[0]["with"]["path"] == "docs/_build/html"
    passenv = re.split(r"\n\S", (ROOT / "tox.ini").read_text(encoding="utf-8").split("passenv =", 1)[1], 1)[0]
    assert "LN_TUTORIAL_*" in passenv.split(), "tox must pass LN_TUTORIAL_BASE_URL to docs/build.py"
    gpu = _workflow(ROOT / ".github" / "workflows" / "pages-gpu.yml")["jobs"]["build"]
    assert {"self-hosted", "gpu"} <= set(gpu["runs-on"])


def test_every_workflow_is_validated_in_ci():
    ini = (ROOT / "tox.ini").read_text(encoding="utf-8")
    section = ini.split("[testenv:workflows]", 1)[1].split("\n[", 1)[0]
    assert "check-jsonschema --builtin-schema vendor.github-workflows" in section
    for path in WORKFLOWS:
        assert str(path.relative_to(ROOT)) in section, f"{path.name} is not validated by tox -e workflows"
    assert "tox -e workflows" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


# --- the README's set-up and the examples extra ------------------------------------------------
def test_readme_setup_is_a_venv_with_torch_and_tox():
    lines = readme_setup_lines()
    assert lines[0].startswith("python3 -m venv .venv")
    assert any(line.startswith("pip install torch ") and "whl/cpu" in line for line in lines)
    assert any(line.startswith("pip install") and "tox" in line.split() for line in lines)
    assert lines[-2:] == ["tox -e docs", "tox -e py"]


def test_examples_extra_covers_what_the_scripts_import():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    provided = {"ln_tutorial", "ln_tutorial_book"} | {  # the two packages of this distribution
        re.split(r"[<>=!~\[ ;]", d)[0] for d in project["dependencies"]}
    provided |= set(project["optional-dependencies"]["examples"])
    for script in sorted((ROOT / "examples").glob("[0-9][0-9]_*.py")):
        tree = ast.parse(script.read_text(encoding="utf-8"))
        modules = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                   for alias in node.names}
        modules |= {node.module.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module and not node.level}
        missing = modules - set(sys.stdlib_module_names) - provided
        assert not missing, f"{script.name} imports {missing}: add them to the examples extra"
