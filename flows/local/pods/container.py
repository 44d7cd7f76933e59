"""A container template as one local process: its own command and args as a subprocess,
the image's ``python``/``torchrun`` this interpreter's, its env with Secrets read from
ours. Paths a template declares for its outputs are moved to the task's directory
(``flows.local.pods.output_paths``). Jobs and InferenceServices take their container's
argv and env from here (``flows.local.pods.jobs``, ``services``)."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

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
    return ProcessSpec(local_argv(argv), env, cwd, template_deadline(template), path_map)


def template_deadline(template: Mapping[str, Any]) -> float | None:
    value = template.get("activeDeadlineSeconds")
    return float(value) if value not in (None, "") else None
