"""tox plugin (loaded by tox 4 from this file): environments reuse the packages of the Python that runs tox.

tox's own ``system_site_packages`` shows an environment the site-packages of the
*base* interpreter. Run from a venv, that is not the venv: a torch installed in the
venv stays invisible and pip downloads another one (the default CUDA build, GBs).
Instead, every run environment gets ``ln_tutorial-runner.pth`` in its site-packages,
written before anything is installed into it, that adds the site-packages of the
interpreter running tox (venv, conda or system alike) after the environment's own.
pip then finds torch and triton installed and keeps them; whatever an environment
installs itself still comes first.
"""

from __future__ import annotations

import site
import sys
from pathlib import Path

from tox.plugin import impl
from tox.tox_env.python.runner import PythonRun

PTH_NAME = "ln_tutorial-runner.pth"


def runner_site_dirs() -> list[str]:
    """The site-packages directories of the interpreter running tox, in its own order."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]


def pth_text(dirs: list[str]) -> str:
    # An "import" line runs at start-up: site.addsitedir also reads the .pth files of
    # those directories (editable installs, conda's), as the runner itself does.
    return "".join(f"import site; site.addsitedir({d!r})\n" for d in dirs)


def same_interpreter(info) -> bool:
    """Compiled packages (torch) only load in the implementation and version they were built for."""
    return (info.implementation.lower() == sys.implementation.name.lower()
            and tuple(info.version_info[:2]) == sys.version_info[:2])


def link_runner_site(tox_env) -> None:
    if not isinstance(tox_env, PythonRun) or not same_interpreter(tox_env.base_python):
        return
    target = Path(tox_env.env_site_package_dir()) / PTH_NAME
    text = pth_text(runner_site_dirs())
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


@impl
def tox_on_install(tox_env, arguments, section, of_type) -> None:  # noqa: ARG001 - the hook's signature
    link_runner_site(tox_env)


@impl
def tox_before_run_commands(tox_env) -> None:
    # Also for an environment created earlier by another Python: it follows this one.
    link_runner_site(tox_env)
