"""A container template, or a PyTorchJob resource template, as one local process.

A container template runs its own command and args as a subprocess; a PyTorchJob resource
template runs its Master replica's ``pytorch`` container command with the ``PET_*``
variables the Training Operator sets for one node. Paths a template declares for its
outputs are moved to the task's directory (``flows.local.pods.output_paths``).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from flows.local.errors import UnsupportedFeature
from flows.local.pods.output_paths import OutputPaths
from flows.local.pods.processes import ProcessSpec

# steps.common.step_cli.OUTPUTS_ENV, not imported: the runner never imports step code
OUTPUTS_ENV = "CIFAR_OUTPUTS_DIR"


def local_argv(argv: list[str]) -> list[str]:
    """The image's ``python``/``torchrun`` are this interpreter's on one machine."""
    if not argv:
        return argv
    head = PurePosixPath(argv[0]).name
    if re.fullmatch(r"python(3(\.\d+)?)?", head):
        return [sys.executable, *argv[1:]]
    if head == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    return argv


def container_env(container: Mapping[str, Any], base: Mapping[str, str]) -> dict[str, str]:
    """The process environment: ours, plus the container's own; Secret references are
    read from our environment under the Secret's key name, never from anywhere else."""
    env = dict(base)
    for source in container.get("envFrom", []):
        prefix = source.get("prefix", "")
        for key, value in base.items():
            if prefix and key.startswith(prefix):
                env[key] = value
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "valueFrom" in item:
            secret = item["valueFrom"].get("secretKeyRef")
            if secret is None:
                raise UnsupportedFeature(f"env {item['name']}: valueFrom other than secretKeyRef")
            if secret["key"] in base:
                env[item["name"]] = base[secret["key"]]
    return env


def single_node_env(nproc: int, task_dir: Path) -> dict[str, str]:
    """The ``PET_*`` torchrun options of a one-node job (the operators set them per node),
    and where rank 0 leaves its results (test accuracy, busy time) for the local summary:
    not set by an operator."""
    return {
        "PET_NNODES": "1",
        "PET_NODE_RANK": "0",
        "PET_NPROC_PER_NODE": str(nproc),
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(free_port()),
        OUTPUTS_ENV: str(task_dir / "outputs"),
    }


def named(job: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``job`` with the ``metadata.name`` the API server would give its ``generateName``."""
    metadata = job.setdefault("metadata", {})
    if "name" not in metadata:
        suffix = f"{int(time.time()) % 100000:05d}"
        metadata["name"] = metadata.get("generateName", prefix) + suffix
    return job


def container_process(
    template: Mapping[str, Any], task_dir: Path, cwd: Path, base_env: Mapping[str, str]
) -> ProcessSpec:
    """The container's command and args with its env; the paths in them that name a
    declared output moved to the task's directory (``flows.local.pods.output_paths``)."""
    container = template["container"]
    paths = OutputPaths.of(template, task_dir)
    argv = [paths.rewrite(a) for a in [*container.get("command", []), *container.get("args", [])]]
    env = container_env(container, base_env)
    for item in container.get("env", []):  # the template's own values, not this machine's
        if "value" in item:
            env[item["name"]] = paths.rewrite(env[item["name"]])
    path_map = paths.path_map(template, cwd)
    if not path_map:
        # Not set in a pod: lets a step that declares no outputs (the exit handler) leave
        # its summary.json (busy and start-up time) where benchmarks/local_overhead.py reads.
        env.setdefault(OUTPUTS_ENV, str(task_dir / "outputs"))
    return ProcessSpec(local_argv(argv), env, cwd, _deadline(template), path_map)


def _deadline(template: Mapping[str, Any]) -> float | None:
    value = template.get("activeDeadlineSeconds")
    return float(value) if value not in (None, "") else None


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def processes_per_node(value: Any) -> int:
    """``nprocPerNode`` as torchrun takes it; ``auto``: the GPUs present, else 1."""
    if value in (None, "", "auto"):
        try:
            import torch

            return max(torch.cuda.device_count(), 1)
        except ImportError:
            return 1
    if str(value) in ("gpu", "cpu"):
        raise UnsupportedFeature(f"nprocPerNode {value!r} (use a number or auto)")
    return int(value)


def pytorchjob_process(
    template: Mapping[str, Any], task_dir: Path, cwd: Path, base_env: Mapping[str, str]
) -> tuple[ProcessSpec, dict]:
    """The Master's ``pytorch`` container as one node of the job: the torchrun launch
    the Training Operator would make, with ``PET_*`` for a single node."""
    job = yaml.safe_load(template["resource"]["manifest"])
    specs = job.get("spec", {}).get("pytorchReplicaSpecs", {})
    master = specs.get("Master")
    if not master:
        raise UnsupportedFeature("PyTorchJob without a Master replica")
    containers = master["template"]["spec"]["containers"]
    container = next((c for c in containers if c.get("name") == "pytorch"), None)
    if container is None:
        raise UnsupportedFeature("PyTorchJob Master without a container named pytorch")
    nproc = processes_per_node(job["spec"].get("nprocPerNode"))
    env = container_env(container, base_env)
    env.update(single_node_env(nproc, task_dir), MASTER_ADDR="127.0.0.1")
    argv = [*container.get("command", []), *container.get("args", [])]
    if argv and PurePosixPath(argv[0]).name != "torchrun":
        raise UnsupportedFeature(
            f"PyTorchJob command {argv[0]!r} (the local runner launches torchrun)"
        )
    deadline = job["spec"].get("runPolicy", {}).get("activeDeadlineSeconds")
    spec = ProcessSpec(
        local_argv(argv), env, cwd, float(deadline) if deadline else _deadline(template)
    )
    return spec, named(job, "pytorchjob-")
