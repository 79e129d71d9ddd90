"""The import graph has no back-edges: kernels <- core <- workers <- service (api, cli, dashboard).

Built from the source with ``ast`` (every ``import``/``from ... import``, including the ones inside
functions: a lazy import is still a dependency). The core is the part of ``service`` that workers may use
(configuration, the data model, statistics, winners, sweep lifecycle, the package store, table generation);
the rest of ``service`` is the user-facing top layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("kernels", "service", "workers")
CORE = (
    "service.config",
    "service.db",
    "service.statistics",
    "service.winners",
    "service.sweeps",
    "service.kernel_store",
    "service.kernel_analysis_store",
    "service.observed",
    "service.tables",
)
LAYER_NAMES = ("kernels", "core", "workers", "service")


def layer_of(module: str) -> int:
    """0 kernels, 1 core, 2 workers, 3 the service's user-facing modules."""
    if module == "kernels" or module.startswith("kernels."):
        return 0
    if any(module == core or module.startswith(core + ".") for core in CORE):
        return 1
    if module == "workers" or module.startswith("workers."):
        return 2
    return 3


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = REPO) -> set[str]:
    """Absolute module names a file imports (relative imports are resolved against its package)."""
    tree = ast.parse(path.read_text(), str(path))
    name = module_name(path, root)
    package = name.rsplit(".", 1)[0] if path.name != "__init__.py" else name
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            found.add(base)
    return {name for name in found if name.split(".")[0] in PACKAGES}


def back_edges(root: Path = REPO) -> list[str]:
    edges = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            source = module_name(path, root)
            for target in sorted(imports_of(path, root)):
                if layer_of(target) > layer_of(source):
                    edges.append(
                        f"{source} ({LAYER_NAMES[layer_of(source)]}) imports {target} "
                        f"({LAYER_NAMES[layer_of(target)]})"
                    )
    return edges


def test_imports_point_only_down() -> None:
    assert back_edges() == []


@pytest.mark.parametrize(
    ("module", "layer"),
    [("kernels.packages.loader", 0), ("service.winners", 1), ("workers.runner", 2), ("service.api.app", 3)],
)
def test_layers_are_assigned_as_documented(module: str, layer: int) -> None:
    assert layer_of(module) == layer


def test_a_back_edge_is_found(tmp_path: Path) -> None:
    """The checker is not vacuous: lazy and relative back-edges in a copy of the layout are reported."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "kernels" / "probe.py").write_text("def f():\n    from workers.runner import run_task\n")
    (tmp_path / "service" / "winners.py").write_text("from .api import app\n")
    assert back_edges(tmp_path) == [
        "kernels.probe (kernels) imports workers.runner (workers)",
        "service.winners (core) imports service.api (service)",
    ]
