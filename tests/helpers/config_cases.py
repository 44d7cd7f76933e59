"""The configs the cluster tests render, as pytest cases: each config with the settings
that change what its pods may do (RDMA, its memory locking, the host network), under both
training launchers."""

from __future__ import annotations

import pytest

# (config, --set values): every config as shipped, then the training pods' options
CONFIG_VARIANTS: list[tuple[str, list[str]]] = [
    ("local", []),
    ("smoke", []),
    ("cluster", []),
    ("kind", []),
    ("cluster", ["cluster.rdma=true"]),
    ("cluster", ["cluster.rdma=true", "cluster.rdma_memlock=node"]),
    ("cluster", ["cluster.host_network=true"]),
]
RDMA_ON_HOST_NETWORK = ("cluster", ["cluster.rdma=true", "cluster.host_network=true"])


def launcher_cases(variants: list[tuple[str, list[str]]]) -> list:
    """Each (config, sets) with train.launcher pytorchjob and trainjob, as ``name, sets``
    params with ids ``<config>-<launcher>-<sets>``."""
    return [
        pytest.param(
            name, [f"train.launcher={launcher}", *sets], id=f"{name}-{launcher}-{'-'.join(sets)}"
        )
        for name, sets in variants
        for launcher in ("pytorchjob", "trainjob")
    ]
