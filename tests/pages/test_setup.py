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
* The first hour of a newcomer: the README, the index page and the installation
  page agree (the quick start, the downloads' install line, the pages, what
  pytest reports), and the installation page's checks print what it says.
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

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
build = load_module("ln_docs_build_setup", ROOT / "docs" / "build.py")


README = (ROOT / "README.md").read_text(encoding="utf-8")
INSTALLATION = (ROOT / "docs" / "installation.md").read_text(encoding="utf-8")
INDEX = (ROOT / "docs" / "index.rst").read_text(encoding="utf-8")
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def readme_block(marker: str) -> list[str]:
    """The lines of the README's code block after "<!-- <marker>" (what .ci/ runs)."""
    block = re.search(rf"^<!-- {marker}.*?\n```\w*\n(.*?)^```", README, re.M | re.S)
    assert block, f"README.md has no <!-- {marker} --> block"
    return block.group(1).strip().splitlines()


def readme_setup_lines() -> list[str]:
    """The README's block after "<!-- newcomer" (what .ci/newcomer runs)."""
    return readme_block("newcomer")


def markdown_block(text: str, after: str, lang: str) -> str:
    """The first ```lang block of a Markdown text after the words ``after``."""
    assert after in text, f"no {after!r}"
    block = re.search(rf"^```{lang}\n(.*?)^```", text.split(after, 1)[1], re.M | re.S)
    assert block, f"no {lang} block after {after!r}"
    return block.group(1)


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
        assert (steps["Build both editions"]["env"]["LN_TUTORIAL_REPOSITORY_URL"]
                == "${{ github.server_url }}/${{ github.repository }}"), "the clone line names the repository"
        upload = [s for s in build_job["steps"] if "upload-pages-artifact" in s.get("uses", "")]
        assert upload and upload[0]["with"]["path"] == "docs/_build/html"
    pages = _workflow(ROOT / ".github" / "workflows" / "pages.yml")["jobs"]["build"]["steps"]
    install = [s["run"] for s in pages if "Install" in s.get("name", "")]
    assert install, "pages.yml has no install step"
    assert [line.removeprefix("python -m ") for line in install[0].strip().splitlines()] == lines[1:3]
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
def test_readme_setup_is_a_venv_with_torch_the_package_and_tox():
    lines = readme_setup_lines()
    assert lines[0].startswith("python3 -m venv .venv")
    assert lines[1] == CPU_TORCH, "the CPU torch first (.ci/newcomer replaces this line on its machines)"
    # the package itself, into the venv (the quick start imports it from any folder), after torch
    assert lines[2].split()[:3] == ["pip", "install", "-e"] and lines[2].split()[3] == "." and "tox" in lines[2].split()
    assert lines[-2:] == ["tox -e docs", "tox -e py"]


def test_index_and_installation_pages_install_as_the_readme_does():
    """Both pages: the CPU torch, then the package; their clone line names the repository."""
    index = re.search(r"^Quick start\n(.*?)^\S", INDEX, re.M | re.S)
    assert index, "the index page has no quick start"
    index = index.group(1)
    for text in (index, INSTALLATION):
        assert CPU_TORCH in text and "pip install -e ." in text
        assert text.index(CPU_TORCH) < text.index("pip install -e .")
    assert "git clone |repository_url| ln_tutorial" in index
    assert "```{parsed-literal}\ngit clone {{ repository_url }} ln_tutorial\n" in INSTALLATION
    assert "<this repository>" not in INSTALLATION


def test_index_quick_start_is_the_readmes():
    block = re.search(r"^   \.\. code-block:: python\n\n(.*?)\n(?=\S)", INDEX.split("Quick start", 1)[1], re.M | re.S)
    assert block, "no Python block in the index page's quick start"
    code = [line.removeprefix("      ") for line in block.group(1).rstrip().splitlines()]
    assert code == readme_block("quickstart"), "the index page's quick start differs from the README's"


def test_quick_start_says_what_it_prints():
    """.ci/newcomer runs the block and compares its output with the comments of its print lines."""
    prints = [line for line in readme_block("quickstart") if line.startswith("print(")]
    assert prints and all(re.search(r"\)  +# \S", line) for line in prints)
    assert 'os.environ["TRITON_INTERPRET"] = "1"' in readme_block("quickstart")[1]


def test_downloads_install_line_brings_no_cuda_torch():
    """The CPU torch first: pip then finds torch installed and fetches no CUDA build for the package."""
    lines = readme_block("downloads")
    install = lines[0]
    assert install == f'{CPU_TORCH} && pip install -e ".[examples]"'
    assert [line.split()[0] for line in lines[1:]] == ["python", "ipython"]
    assert lines[1].split()[1].endswith(".py") and lines[2].split()[1].endswith(".ipynb")
    page = markdown_block(INSTALLATION, "(downloads)=", "bash")
    assert page.strip().splitlines() == lines, "the installation page and the README differ"
    assert "jupyter execute --inplace" in README and "jupyter execute --inplace" in INSTALLATION
    tomllib = pytest.importorskip("tomllib")
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert {"ipython", "nbclient", "ipykernel"} <= set(extra["examples"]), "the notebook commands' packages"


def test_five_pages_everywhere():
    stems = sorted(p.stem for p in (ROOT / "examples").glob("[0-9][0-9]_*.py"))
    assert len(stems) == 5
    for stem in stems:
        assert f":doc:`tutorials/{stem}`" in INDEX, f"the index page does not list {stem}"
    assert "the five tutorial pages" in README


def test_readme_says_what_pytest_reports():
    """tox -e py deselects (-m) the gpu and site tests: pytest counts them as "deselected", not skipped."""
    ini = (ROOT / "tox.ini").read_text(encoding="utf-8")
    commands = ini.split("[testenv]", 1)[1].split("\n[", 1)[0]
    assert '-m "not gpu and not site"' in commands
    for text in (README, INSTALLATION):
        assert 'pytest -m "not gpu and not site"' in text
        assert 'counts them as "deselected"' in text
        assert "are skipped" not in text
    assert "deselected" in (ROOT / ".ci" / "newcomer").read_text(encoding="utf-8")


def _run_snippet(code: str, cwd: Path, on_gpu: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if not on_gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_installation_check_prints_what_the_page_says(tmp_path):
    import torch

    on_gpu = torch.cuda.is_available()
    code = markdown_block(INSTALLATION, "Check that it works", "python")
    expected = markdown_block(INSTALLATION, "Check that it works", "text")
    assert "(without one, `cpu` instead of `cuda`)" in INSTALLATION
    if not on_gpu:
        expected = expected.replace("on cuda", "on cpu")
    assert _run_snippet(code, tmp_path, on_gpu) == expected


def test_interpreter_check_prints_what_the_page_says(tmp_path):
    command = markdown_block(INSTALLATION, "(cpu-only)=", "bash").strip()
    code = re.fullmatch(r'TRITON_INTERPRET=1 python -c "(.*)"', command)
    assert code, command
    expected = markdown_block(INSTALLATION, "(cpu-only)=", "text")
    env_code = "import os; os.environ['TRITON_INTERPRET'] = '1'\n" + code.group(1)
    assert _run_snippet(env_code, tmp_path, on_gpu=False) == expected


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
