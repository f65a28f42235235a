"""One public surface, declared once; dependencies point one way (DESIGN §9)."""

from __future__ import annotations

import ast
import subprocess
import sys

from conftest import REPO

import veralith


def test_all_is_sorted_and_complete():
    assert veralith.__all__ == sorted(veralith.__all__)
    public = {n for n in vars(veralith) if not n.startswith("_")} - {"__version__"}
    modules = {n for n in public if type(getattr(veralith, n)).__name__ == "module"}
    assert set(veralith.__all__) == public - modules
    for name in veralith.__all__:
        assert getattr(veralith, name) is not None


def test_import_is_light():
    code = ("import sys, veralith; heavy = [m for m in ('langchain', 'langchain_core', 'chromadb', 'tiktoken', "
            "'openai') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# layer -> layers it must never import
FORBIDDEN = {
    "veralith.models": ["veralith.pipeline", "veralith.llm", "veralith.store", "veralith.sdk", "veralith.cli",
                        "veralith.adapters", "veralith.observability"],
    "veralith.policy": ["veralith.pipeline", "veralith.llm", "veralith.store", "veralith.sdk", "veralith.cli"],
    "veralith.llm": ["veralith.pipeline", "veralith.sdk", "veralith.cli", "veralith.adapters"],
    "veralith.observability": ["veralith.pipeline", "veralith.sdk", "veralith.cli", "veralith.adapters",
                               "veralith.store"],
    "veralith.pipeline.judges": ["veralith.store", "veralith.sdk", "veralith.cli", "sqlite_utils", "sqlite3"],
    "veralith.pipeline": ["veralith.sdk", "veralith.cli", "veralith.adapters"],
    "veralith.store": ["veralith.pipeline", "veralith.llm", "veralith.sdk", "veralith.cli", "veralith.adapters",
                       "veralith.observability"],
    # The command line's modules (app, batch, records, render) are private to it.
    "veralith.sdk": ["veralith.cli"],
    "veralith.adapters": ["veralith.cli"],
}
# The one sanctioned exception: the LLM cache keeps its rows in the same SQLite file as the store.
ALLOWED = {("veralith.llm.cache", "veralith.store")}


def _imports(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_dependencies_point_one_way():
    violations = []
    for path in sorted((REPO / "veralith").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for layer, banned in FORBIDDEN.items():
            if module != layer and not module.startswith(layer + "."):
                continue
            for imported in _imports(path):
                for ban in banned:
                    if (imported == ban or imported.startswith(ban + ".")) and not any(
                            module.startswith(a) and imported.startswith(b) for a, b in ALLOWED):
                        violations.append(f"{module} imports {imported}")
    assert not violations, violations


def test_the_offline_backend_never_loads_the_openai_sdk():
    code = ("import sys, veralith; from veralith.config import settings\n"
            "with settings.override(backend='local'):\n"
            "    veralith.evaluate('What is X?', ['X is a letter.'], 'X is a letter.', persist=False)\n"
            "print('openai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
