"""The package's shape: imports go one way (lower floors never import higher ones, no cycles), and
the C++ node's argument lists are the kernels' signatures."""

import ast
import inspect
import re
from pathlib import Path

import pytest

import ln_tutorial
from ln_tutorial import kernels
from ln_tutorial.variants import one_launch, split

PACKAGE = Path(ln_tutorial.__file__).parent

#: Each module's floor: a module imports only modules of lower floors (shared bases of the variants
#: sit between the default path and the variants that build on them).
FLOORS = {
    "_common": 0, "differentiable": 0,
    "kernels": 1, "tuning": 1,
    "host": 2,
    "variants": 3, "variants.cooperative": 3, "variants.fast_launch": 3,
    "variants.lock": 4, "variants.one_launch": 4, "variants.split": 4, "variants.two_tiles": 4, "variants.native": 4,
    "variants.cluster": 5,
    "dispatch": 6,
    "function": 7, "explain": 7,
    "module": 8,
    "__init__": 9, "__main__": 9,
}  # fmt: skip


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    return name.removesuffix(".__init__") if name != "__init__" else name


def _imports(path: Path) -> set:
    """The package modules ``path`` imports, at any depth of its code (lazy imports count)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ln_tutorial"):
            base = node.module.removeprefix("ln_tutorial").lstrip(".")
            for alias in node.names:
                full = f"{base}.{alias.name}".lstrip(".")
                found.add(full if full in FLOORS else base or "__init__")
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("ln_tutorial.") for a in node.names if a.name.startswith("ln_tutorial.")}
    return found


def test_every_module_has_a_floor():
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    assert modules == set(FLOORS), f"give these modules a floor: {modules ^ set(FLOORS)}"


def test_imports_go_down_only():
    """No module imports one of its own floor or above: so there is no import cycle either."""
    upward = []
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        for imported in _imports(path):
            if FLOORS[imported] >= FLOORS[name]:
                upward.append(f"{name} (floor {FLOORS[name]}) imports {imported} (floor {FLOORS[imported]})")
    assert not upward, upward


def test_the_floor_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The check above fails on a planted upward import (a lazy one, inside a function)."""
    planted = tmp_path / "host.py"
    planted.write_text((PACKAGE / "host.py").read_text() + "\n\ndef f():\n    from ln_tutorial import dispatch\n")
    assert "dispatch" in _imports(planted)


def _cpp_list(macro: str) -> list:
    source = (PACKAGE / "variants" / "csrc" / "layer_norm.cpp").read_text()
    body = re.search(rf"#define {macro}\(A\)((?:.*\\\n)*.*)", source).group(1)
    return re.findall(r"A\((\w+)\)", body)


def _runtime_arguments(kernel) -> list:
    """A kernel's arguments that are not compile-time constants, in its signature's order."""
    fn = getattr(kernel, "fn", kernel)
    return [p.name for p in inspect.signature(fn).parameters.values() if "constexpr" not in str(p.annotation)]


def _union(*kernels_) -> set:
    return {name for k in kernels_ for name in _runtime_arguments(k)}


@pytest.mark.parametrize("macro", ["LN_FORWARD_ARGUMENTS", "LN_BACKWARD_ARGUMENTS"])
def test_cpp_argument_lists_are_the_kernels_signatures(macro):
    """Every name the C++ node passes is an argument of a kernel it launches, and every argument of
    those kernels is one it passes (the order comes from each kernel's signature at run time)."""
    if macro == "LN_FORWARD_ARGUMENTS":
        from ln_tutorial.variants import two_tiles

        launched = _union(kernels.layer_norm_fwd_kernel, kernels.layer_norm_fwd_looped_kernel,
                          two_tiles.layer_norm_fwd_two_tiles_kernel)  # fmt: skip
    else:
        launched = _union(kernels.layer_norm_bwd_persistent_kernel, kernels.partial_sum_kernel,
                          one_launch.layer_norm_bwd_one_launch_kernel, split.layer_norm_bwd_split_kernel)  # fmt: skip
    passed = _cpp_list(macro)
    assert len(passed) == len(set(passed)), f"{macro} names an argument twice"
    assert set(passed) == launched, f"{macro}: only in C++ {set(passed) - launched}, only in kernels {launched - set(passed)}"


def test_the_package_reads_in_one_sitting():
    """The package, Python and C++ with comments, stays within 3,400 lines."""
    files = [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.cpp")]
    assert sum(len(f.read_text().splitlines()) for f in files) <= 3400
