"""The design wing's imports run one way: it uses the other wings, and only the tasks use it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "controversial"
ABOVE_THE_DESIGN = ("controversial.tasks", "controversial.cli", "controversial.settings")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, absolute names (``from controversial import design`` gives both)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def is_within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_only_the_tasks_import_the_design_package():
    outside = [
        path for path in sorted(PACKAGE.rglob("*.py")) if path.relative_to(PACKAGE).parts[0] not in ("design", "tasks")
    ]
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            n for n in imported_modules(path) if is_within(n, "controversial.design")
        )
        for path in outside
    }
    assert len(outside) > 50  # the walk found the package
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_design_package_imports_no_command_layer():
    found = {
        str(path.relative_to(PACKAGE)): sorted(
            n for n in imported_modules(path) if any(is_within(n, above) for above in ABOVE_THE_DESIGN)
        )
        for path in sorted((PACKAGE / "design").glob("*.py"))
    }
    assert len(found) >= 8
    assert {path: names for path, names in found.items() if names} == {}


def test_the_check_sees_an_import_of_the_design_package(tmp_path):
    module = tmp_path / "module.py"
    module.write_text("from controversial import design\nimport controversial.design.optimiser as o\n")
    assert {"controversial.design", "controversial.design.optimiser"} <= imported_modules(module)
