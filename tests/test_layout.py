"""The package's layout: folders that are the layers, and modules short enough to read whole."""

from __future__ import annotations

import tomllib
from typing import Final

from tests.support import ROOT

PACKAGE: Final = ROOT / "agentloop"


def layers() -> list[list[str]]:
    """The import contract's layers, top to bottom, each the modules it names."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [
        found for found in config["tool"]["importlinter"]["contracts"] if found["type"] == "layers"
    ]
    return [[name.strip() for name in layer.split("|")] for layer in contract["layers"]]


def test_the_import_contract_names_each_folder_and_top_level_module_once() -> None:
    """One entry a folder (or a rank of facades): the layers are the folders of agentloop/."""
    named = [name for layer in layers() for name in layer]
    present = {
        f"agentloop.{path.parent.name if path.name == '__init__.py' else path.stem}"
        for path in [*PACKAGE.glob("*/__init__.py"), *PACKAGE.glob("*.py")]
        if path.name != "__init__.py" or path.parent != PACKAGE
    }
    assert sorted(named) == sorted(present)
    assert all(name.count(".") == 1 for name in named)  # a folder, never a module inside one


def test_every_module_is_at_most_450_lines() -> None:
    """Each module of the package stays short enough to read whole."""
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > 450
    }
    assert long == {}


def test_no_two_private_modules_share_a_name() -> None:
    """Inside the private packages each module's name is its own: a name leads to one file."""
    seen: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        inside = path.relative_to(PACKAGE).parts
        if path.name != "__init__.py" and len(inside) > 1 and inside[0].startswith("_"):
            seen.setdefault(path.stem, []).append("/".join(inside))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}
