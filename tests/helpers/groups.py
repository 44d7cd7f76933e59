"""The suite's marks and xdist groups from the fixtures a test reads (tests/conftest.py
registers the hook): ``slow`` for the expensive fixtures, one xdist group per expensive
session fixture."""

from __future__ import annotations

import pytest

# Fixtures that take more than a few seconds to set up (a model trained and optimized, a
# whole pipeline run, torchrun, a cluster build): every test that uses one is ``slow``, so
# ``pytest -m "not slow"`` (the everyday subset, README "Set up") leaves it out. Tests
# slow on their own carry the mark themselves.
SLOW_FIXTURES = {
    "bundle",  # tests/helpers/model_bundle.py: a tiny model trained, then every variant built
    "champion",
    "served",
    "ddp_run",  # tests/test_train.py: torchrun with 2 ranks and MLflow
    "dry_run",  # tests/test_gpu_benchmark.py: benchmarks/gpu.py --quick
    "smoke_run",  # below (tests/helpers/pipeline_runs.py): the smoke pipeline, failed and resumed
    "transaction",  # tests/test_local_rollback.py: a first deployment
    "memo_runs",  # tests/test_local_memo.py: runs after a change, over one memo cache
    "builds",  # tests/test_cluster_install.py: kustomize builds of every layer
}


# pytest-xdist (pyproject's addopts: two workers, ``--dist loadgroup``) builds a session
# fixture once per worker and a module's fixture once per worker that runs one of its
# tests: the tests that read one of these expensive fixtures are one group, run by one
# worker, which builds it once. A test that reads several is in the first one's group.
GROUPED_BY = (
    "bundle",
    "smoke_run",
    "transaction",
    "memo_runs",
    "dry_run",
    "builds",
    "dataset_uri",
)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if SLOW_FIXTURES & used:
            item.add_marker(pytest.mark.slow)
        group = next((name for name in GROUPED_BY if name in used), None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
