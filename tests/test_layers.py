"""The packages' dependencies point one way (ARCHITECTURE.md): platform → workers → learn → verify
→ model → graph, ledger, config, metrics; the HTTP client stands alone. Read from the source with
``ast``, imports inside functions included, so a lazy import cannot hide an edge. The tests mirror
the packages and share helpers only through ``tests/support`` (and the services of ``tests/services``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "factloom"
# higher may import lower (and its own layer's package), never the other way
LAYER = {
    "config": 0, "metrics": 0, "runtime": 0, "ledger": 0, "graph": 0, "client": 0,
    "model": 1, "verify": 2, "learn": 3, "workers": 4, "platform": 5,
}


def _imports(path: Path, package: str = "factloom") -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(f"{package}."):
            found.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.module == package:  # from tests import test_x
            found |= {f"{package}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(f"{package}.")}
    return found


def test_no_package_imports_one_above_it() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = path.relative_to(PACKAGE).with_suffix("").parts[0]
        assert here in LAYER or here == "__init__", f"{path}: put the package {here!r} in a layer"
        for module in _imports(path):
            there = module.split(".")[1]
            if there != here and (LAYER.get(there, 0) > LAYER.get(here, 0) or (here == "client")):
                wrong.append(f"{path.relative_to(PACKAGE.parent)} imports {module}")
    assert wrong == []


def test_the_model_layer_loads_without_the_neo4j_driver_or_the_ledger() -> None:
    code = ("import sys, factloom.model.router, factloom.model.reasoner, factloom.model.scorer, "
            "factloom.model.features, factloom.model.pathrank, factloom.model.pipeline; "
            "print(sorted(m for m in ('neo4j', 'sqlalchemy', 'factloom.config') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_tests_sit_beside_their_package_and_import_no_other_test() -> None:
    tests = PACKAGE.parent / "tests"
    wrong = []
    for path in sorted(tests.rglob("*.py")):
        folder = path.relative_to(tests).parts[0]
        if folder not in ("support", path.name, "__pycache__") and folder not in LAYER:
            wrong.append(f"{path.relative_to(tests)}: tests/{folder}/ names no package of factloom/")
        for module in _imports(path, "tests"):
            if module.split(".")[1] not in ("support", "services"):
                wrong.append(f"{path.relative_to(tests)} imports {module}: share it through tests/support")
    assert wrong == []
