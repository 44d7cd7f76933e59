"""What decides each costly step's outputs, as its Argo memoization key.

A key is ``<step>-i<image>-c<config>[-p<parameters>][-u<inputs>]``, each part the first
12 hex digits of a sha256:

- ``i``: the step's image reference (``images.image``: tag, and digest where
  ``images.digests`` pins one); in a local run the step's source stands in for it
  (``steps/<package>/`` and ``steps/common/``, hashed): the code that runs.
- ``c``: the config fields the step reads, less those that do not decide what it writes
  (how hard a download tries, how often training checkpoints) and those a workflow
  parameter stands for: hashed here, at render time.
- ``p``: the workflow parameters it reads, after substitution: ``{{=...}}`` tags Argo
  evaluates when the node is about to run.
- ``u``: the upstream outputs it reads (the dataset, model and optimized URIs of this
  run, or of the earlier run a memo hit handed on): they name content, so a step upstream
  that runs again makes a new URI, and everything reading it runs again too.

Where a step writes (its run's own output URI), the MLflow run id and the workflow's name
are not in the key: they change with every run.

Argo v4.0.5 takes a key of ``[a-zA-Z0-9][-a-zA-Z0-9]*`` only
(workflow/controller/cache/cache.go ``cacheKeyRegex``), as a ConfigMap data key of at
most 253 characters; ``maxAge`` is Go's ``time.ParseDuration`` of the template's value
after substitution (operator.go ``executeTemplate``): here the input ``memo-max-age``, so
the task that runs a step again after a dead hit passes ``0s``, misses, and overwrites the
entry (configmap_cache.go ``Save``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hera.workflows import Parameter
from hera.workflows import models as m

from flows.pipeline.parameters import BY_NAME, PARAMETERS
from steps.common.config import REPO_ROOT, PipelineConfig

PART_DIGITS = 12
MAX_AGE_INPUT = "memo-max-age"
RUN_AGAIN = "0s"  # maxAge of a run that must not take the entry: every entry is older
PART_NAMES = {"i": "image", "c": "config", "p": "parameters", "u": "inputs"}


@dataclass(frozen=True)
class MemoStep:
    """One memoized step: what its key holds."""

    name: str  # the key's prefix: the step's task in the DAG
    image: str  # the image it runs in (images.image)
    package: str  # steps/<package>/: its source, standing in for the image locally
    fields: tuple[str, ...]  # config sections or section.field it reads
    ignored: tuple[str, ...]  # fields among those that do not decide its outputs
    params: tuple[str, ...]  # workflow parameters it reads
    inputs: tuple[str, ...]  # its input parameters that name upstream outputs


WHERE = ("storage.root_uri", "storage.endpoint_url")  # where its objects live
STEPS = {
    step.name: step
    for step in (
        MemoStep(
            "stage",
            "data",
            "stage_data",
            ("data", *WHERE),
            ("data.download_retries", "data.download_timeout_s"),
            ("data-source",),
            (),
        ),
        MemoStep(
            "train",
            "train",
            "train",
            # tracking.uri: the run that trained (an output) is a run of that server
            ("train", *WHERE, "tracking.uri", "tracking.enabled"),
            # the same ranks train the same model under either operator; checkpoints are
            # how a restart resumes, not what it ends with
            ("train.launcher", "train.checkpoint_every", "train.keep_checkpoints"),
            (
                "model",
                "epochs",
                "batch-size",
                "lr",
                "target-accuracy",
                "nodes",
                "nproc-per-node",
                "gpus-per-node",
            ),
            ("dataset-uri",),
        ),
        MemoStep(
            "optimize",
            "optimize",
            "optimize",
            ("optimize", "cluster.optimize_gpus", *WHERE, "tracking.uri", "tracking.enabled"),
            # how the builds are guarded (their limit, how many share a build process), not
            # what they build
            ("optimize.build_timeout_s", "optimize.variants_per_process"),
            (),
            ("model-uri", "dataset-uri"),
        ),
        MemoStep(
            "benchmark",
            "optimize",
            "benchmark",
            # the registry it decides against is the tracking server's
            (
                "benchmark",
                "optimize.gpu_precision",
                "cluster.optimize_gpus",
                *WHERE,
                "tracking.uri",
                "tracking.enabled",
            ),
            ("benchmark.load_timeout_s",),  # the guard of a variant's first run, not its numbers
            (),
            ("model-uri", "optimized-uri", "dataset-uri"),
        ),
    )
}


def part(values: list[str]) -> str:
    """One part's digits: what ``sprig.trunc(12, sprig.sha256sum(a + '|' + b))`` gives."""
    return hashlib.sha256("|".join(values).encode()).hexdigest()[:PART_DIGITS]


def _expression(names: list[str]) -> str:
    joined = " + '|' + ".join(names)
    return f"{{{{=sprig.trunc({PART_DIGITS}, sprig.sha256sum({joined}))}}}}"


def config_values(cfg: PipelineConfig, step: MemoStep) -> dict[str, Any]:
    """The config fields the step's key holds: its fields, less the ignored ones and those
    a workflow parameter stands for (the parameter's value is in the key instead)."""
    dumped = cfg.model_dump(mode="json")
    skipped = set(step.ignored) | {p.field for p in PARAMETERS}
    values: dict[str, Any] = {}
    for name in step.fields:
        section, _, field = name.partition(".")
        chosen = [field] if field else list(dumped[section])
        for key in chosen:
            if f"{section}.{key}" not in skipped:
                values[f"{section}.{key}"] = dumped[section][key]
    return values


def source_identity(package: str, root: Path = REPO_ROOT) -> str:
    """The step's source, hashed: every file of ``steps/<package>/`` and ``steps/common/``
    (compiled caches aside), path and content."""
    digest = hashlib.sha256()
    for folder in (root / "steps" / package, root / "steps" / "common"):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                digest.update(str(path.relative_to(root)).encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
    return f"source:{digest.hexdigest()}"


def image_identity(cfg: PipelineConfig, step: MemoStep, source: bool) -> str:
    """What stands for the code that runs: the image reference, or locally its source."""
    return source_identity(step.package) if source else cfg.images.image(step.image)  # type: ignore[arg-type]


def key_of(cfg: PipelineConfig, name: str, *, source: bool = False) -> str:
    """The memoization key of step ``name``: static parts hashed now, the parameters and
    inputs as ``{{=...}}`` tags Argo evaluates for each run."""
    step = STEPS[name]
    config = json.dumps(config_values(cfg, step), sort_keys=True)
    parts = [f"i{part([image_identity(cfg, step, source)])}", f"c{part([config])}"]
    if step.params:
        names = [f"workflow.parameters['{BY_NAME[p].name}']" for p in step.params]
        parts.append("p" + _expression(names))
    if step.inputs:
        parts.append("u" + _expression([f"inputs.parameters['{i}']" for i in step.inputs]))
    return "-".join([name, *parts])


def memoize(cfg: PipelineConfig, name: str, *, source: bool = False) -> m.Memoize:
    """The template's ``memoize``: its key, the cache ConfigMap, and ``maxAge`` from the
    input ``memo-max-age`` (``max_age_input``)."""
    return m.Memoize(
        key=key_of(cfg, name, source=source),
        max_age=f"{{{{inputs.parameters.{MAX_AGE_INPUT}}}}}",
        cache=m.Cache(config_map=m.LocalObjectReference(name=cfg.cluster.cache_configmap)),
    )


def max_age_input(cfg: PipelineConfig, name: str) -> Parameter:
    """The input ``memo-max-age``: the config's age by default; ``0s`` runs it again."""
    c = cfg.cluster
    age = c.stage_cache_max_age if name == "stage" else c.memo_max_age
    return Parameter(name=MAX_AGE_INPUT, default=age, description="memo entries reused this old")


def split_key(key: str) -> tuple[str, dict[str, str]]:
    """An evaluated key's step and parts by name (image, config, parameters, inputs);
    no parts for a key of another form (an older release's)."""
    step, _, rest = key.partition("-")
    parts: dict[str, str] = {}
    for item in rest.split("-") if rest else []:
        if len(item) != PART_DIGITS + 1 or item[0] not in PART_NAMES:
            return step, {}
        parts[PART_NAMES[item[0]]] = item[1:]
    return step, parts
