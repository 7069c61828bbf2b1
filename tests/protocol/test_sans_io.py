"""The protocol layer stays sans-IO, and the layers import one way only.

Walks the source with ``ast`` rather than importing it, so a banned import is caught even
in a function body that no test runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "kafka_ds"
BANNED_IN_PROTOCOL = {"socket", "ssl", "selectors", "threading", "asyncio", "time", "pyspark"}
# Each layer may import itself and the layers below it, never one above.
LAYERS = ["protocol", "net", "client", "spark"]


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("path", _modules("protocol"), ids=lambda p: p.name)
def test_protocol_does_no_io(path: Path) -> None:
    banned = [name for name in _imports(path) if name.split(".")[0] in BANNED_IN_PROTOCOL]
    assert not banned, f"{path.relative_to(PACKAGE)} imports {banned}"


@pytest.mark.parametrize("layer", LAYERS[:-1])
def test_layers_import_downwards_only(layer: str) -> None:
    above = LAYERS[LAYERS.index(layer) + 1:]
    offenders = []
    for path in _modules(layer):
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "kafka_ds" and len(parts) > 1 and parts[1] in above:
                offenders.append(f"{path.relative_to(PACKAGE)} -> {name}")
            if parts[0] == "pyspark":
                offenders.append(f"{path.relative_to(PACKAGE)} -> {name}")
    assert not offenders


def test_package_root_does_not_import_pyspark() -> None:
    assert not [n for n in _imports(PACKAGE / "__init__.py") if n.startswith("pyspark")]
