"""Packaging metadata stays honest: licence, one version, shipped data, supported Pythons.

Nothing is built here (CI builds the sdist and wheel and installs the wheel in a fresh venv after
the tests); these checks read pyproject.toml and the tree, so they take milliseconds.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from fnmatch import fnmatch

import pytest
from conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # build (a dev dependency) brings tomli on 3.10
    tomllib = pytest.importorskip("tomli")

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]


def _package_data() -> list[str]:
    return PYPROJECT["tool"]["setuptools"]["package-data"]["veralith"]


def _shipped(relative: str) -> bool:
    return any(fnmatch(relative, pattern) for pattern in _package_data())


def _claimed_pythons() -> list[str]:
    prefix = "Programming Language :: Python :: 3."
    return [f"3.{c[len(prefix):]}" for c in PROJECT["classifiers"] if c.startswith(prefix)]


def test_license_is_spdx_and_its_files_exist():
    assert PROJECT["license"] == "Apache-2.0"  # PEP 639: an SPDX expression, not a table
    assert not any(c.startswith("License ::") for c in PROJECT["classifiers"])  # PEP 639 forbids both
    assert set(PROJECT["license-files"]) == {"LICENSE", "NOTICE"}
    assert "Apache License" in (REPO / "LICENSE").read_text(encoding="utf-8")[:200]
    assert "Version 2.0" in (REPO / "LICENSE").read_text(encoding="utf-8")[:200]
    notice = (REPO / "NOTICE").read_text(encoding="utf-8")
    assert "Copyright 2026 The Veralith authors" in notice
    assert "coefficients.json" in notice  # the one shipped file derived from third-party data


def test_build_backend_reads_pep_639():
    requires = PYPROJECT["build-system"]["requires"]
    setuptools = next(r for r in requires if r.startswith("setuptools"))
    floor = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", setuptools)
    assert floor and int(floor.group(1)) >= 77, "license = SPDX string and license-files need setuptools>=77"


def test_version_is_written_once():
    assert "version" not in PROJECT.get("dynamic", [])
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?", PROJECT["version"])
    # The installed metadata is what veralith.__version__ reports; a stale editable install shows here.
    assert importlib.metadata.version(PROJECT["name"]) == PROJECT["version"]
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## [{PROJECT['version']}]" in changelog, "CHANGELOG.md has no section for this version"
    assert "## [Unreleased]" in changelog


def test_version_attribute_comes_from_metadata():
    import veralith

    assert veralith.__version__ == PROJECT["version"]


def test_no_version_literal_in_the_package():
    tree = ast.parse((REPO / "veralith" / "__init__.py").read_text(encoding="utf-8"))
    literals = [node for node in ast.walk(tree) if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
                and isinstance(node.value, ast.Constant) and node.value.value == PROJECT["version"]]
    assert not literals, "veralith/__init__.py writes the version again; read it from package metadata"


def test_cli_prints_the_version():
    from typer.testing import CliRunner

    from veralith.cli import app

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"veralith {PROJECT['version']}"


def test_package_data_ships_migrations_coefficients_and_py_typed():
    package = REPO / "veralith"
    migrations = sorted(p.name for p in (REPO / "migrations").glob("*.sql"))
    assert migrations, "no migrations found"
    # veralith/migrations is how the top-level folder reaches the wheel: it must show the same files.
    assert sorted(p.name for p in (package / "migrations").glob("*.sql")) == migrations
    for name in migrations:
        assert _shipped(f"migrations/{name}"), name
    assert (package / "llm" / "local" / "coefficients.json").is_file()
    assert _shipped("llm/local/coefficients.json")
    assert (package / "py.typed").is_file()
    assert _shipped("py.typed")
    word_lists = sorted((package / "llm" / "local" / "words").glob("*"))
    assert word_lists, "the local backend's word lists are missing"
    for path in word_lists:
        assert _shipped(f"llm/local/words/{path.name}"), path.name


def test_supported_pythons_agree_everywhere():
    claimed = _claimed_pythons()
    lowest = re.fullmatch(r">=(3\.\d+)", PROJECT["requires-python"])
    assert lowest, "requires-python should be a plain lower bound"
    assert claimed[0] == lowest.group(1) and claimed == sorted(claimed, key=lambda v: int(v.split(".")[1]))
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py" + lowest.group(1).replace(".", "")
    assert PYPROJECT["tool"]["mypy"]["python_version"] == lowest.group(1)
    workflow = (REPO / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    matrix = re.search(r"python-version:\s*\[([^\]]*)\]", workflow)
    assert matrix, "no python-version matrix in .github/workflows/ci.yml"
    assert re.findall(r"\"(3\.\d+)\"", matrix.group(1)) == claimed


def test_index_metadata_is_complete():
    assert {"Homepage", "Documentation", "Changelog", "Issues"} <= set(PROJECT["urls"])
    assert PROJECT["keywords"]
    for classifier in ("Development Status :: 3 - Alpha", "Typing :: Typed",
                       "Topic :: Scientific/Engineering :: Artificial Intelligence"):
        assert classifier in PROJECT["classifiers"]
    assert PROJECT["scripts"] == {"veralith": "veralith.cli:main"}


def test_pre_commit_runs_the_pinned_ruff():
    pin = next(d for d in PROJECT["optional-dependencies"]["dev"] if d.startswith("ruff"))
    config = (REPO / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    rev = re.search(r"ruff-pre-commit\s+rev:\s*v(\S+)", config)
    assert rev and pin == f"ruff=={rev.group(1)}", "the pre-commit hook and the dev extra run different ruffs"


# `veralith` on the package index is another project; this one is distributed as veralith-rag.
DISTRIBUTION = "veralith-rag"
_INSTALL = re.compile(r"""pip install\s+(?:-[qe]\s+|--[a-z][a-z-]*\s+)*(?P<what>"[^"]+"|'[^']+'|\S+)""")


def test_the_distribution_name_is_not_the_other_projects():
    assert PROJECT["name"] == DISTRIBUTION
    assert PROJECT["scripts"]["veralith"] == "veralith.cli:main"   # the command keeps its name
    assert (REPO / "veralith" / "__init__.py").is_file()             # and so does the import package


def _install_lines() -> list[tuple[str, str]]:
    places = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "sample_app" / "README.md",
              *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "veralith").rglob("*.py")),
              *sorted((REPO / "sample_app").glob("*.py"))]
    found = []
    for path in places:
        for match in _INSTALL.finditer(path.read_text(encoding="utf-8")):
            found.append((f"{path.relative_to(REPO)}: {match.group(0)}", match.group("what").strip("\"'")))
    return found


def test_every_install_line_installs_this_project():
    """Each `pip install` a user is told to run installs this checkout or veralith-rag, never `veralith`."""
    lines = _install_lines()
    assert len(lines) >= 8, lines
    for where, what in lines:
        if what in ("uv", "pre-commit"):  # the tools, not Veralith
            continue
        if what.startswith(("llama-cpp-python", "gemma3-270m")):  # a model server and model (docs/backends.md)
            continue
        ours = what.startswith((".", DISTRIBUTION)) and not what.startswith("..")
        assert ours, f"{where} does not install this project (use a checkout path or {DISTRIBUTION})"
