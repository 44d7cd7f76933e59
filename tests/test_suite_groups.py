"""The suite's own parallelism: pyproject's addopts run two pytest-xdist workers with
``--dist loadgroup``, and tests/conftest.py puts the tests that read one expensive fixture
(``GROUPED_BY``) in one group, so one worker builds it once. Nothing fails when the groups
are ignored (pytest 9.2 with xdist 3.8 does so silently, pytest-dev/pytest-xdist#1386):
the fixture is just built on both workers. This runs the installed pytest and xdist on a
small suite through the conftest's hook and checks the grouping happens."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers.groups import GROUPED_BY
from tests.helpers.paths import REPO_ROOT

SUITE = """
import os
import pytest

@pytest.fixture(scope="module")
def {name}():  # stands in for the expensive fixture of that name
    return os.environ["PYTEST_XDIST_WORKER"]

@pytest.mark.parametrize("i", range(6))
def test_grouped({name}, i):
    assert {name} == os.environ["PYTEST_XDIST_WORKER"]

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    pass
"""
CONFTEST = "from tests.helpers.groups import pytest_collection_modifyitems  # noqa: F401\n"


def test_tests_sharing_an_expensive_fixture_run_on_one_worker(tmp_path: Path) -> None:
    name = GROUPED_BY[0]
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE.format(name=name))
    args = ["-v", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-o", "addopts="]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args, str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = re.findall(
        r"^\[(gw\d)\] \[\s*\d+%\] PASSED \S+::(test_\w+)\[\d\](@\w+)?", done.stdout, re.M
    )
    grouped = [(worker, group) for worker, test, group in ran if test == "test_grouped"]
    assert len(grouped) == 6 and len(ran) == 12, done.stdout[-3000:]
    assert {group for _, group in grouped} == {f"@{name}"}, done.stdout[-3000:]
    assert len({worker for worker, _ in grouped}) == 1, done.stdout[-3000:]
