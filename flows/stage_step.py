"""The staging step: the dataset into the artifact store, memoized by what is staged.

What to stage and where come from the config (``data.source``, ``storage.root_uri``,
``data.md5``) in the step's ``--set`` arguments, as every step's settings do.
"""

from __future__ import annotations

import hashlib

from hera.workflows import Container
from hera.workflows import models as m

from flows.container_step import container_step, file_output
from flows.manifests.pod import OUTPUTS_DIR
from steps.common.config import PipelineConfig


def stage_template(cfg: PipelineConfig, settings: list[str]) -> Container:
    """``stage``: ``python -m steps.stage_data`` with the config alone, memoized."""
    cluster = cfg.cluster
    return container_step(
        cfg,
        name="stage",
        image="data",
        module="steps.stage_data",
        args=["--outputs-dir", OUTPUTS_DIR],
        settings=settings,
        outputs=[
            file_output(name, name.replace("-", "_"))
            for name in ("dataset-uri", "digest", "num-train", "num-test")
        ],
        memoize=m.Memoize(
            key=stage_cache_key(cfg),
            max_age=cluster.stage_cache_max_age,
            cache=m.Cache(config_map=m.LocalObjectReference(name=cluster.cache_configmap)),
        ),
    )


def stage_cache_key(cfg: PipelineConfig) -> str:
    """Memoization key of staging: the data source and where it goes, and the version of
    the code that stages it. Argo allows only ``[a-zA-Z0-9-]`` in a cache key: the source
    is the ``data-source`` parameter, whose value Argo hashes into the key; the rest is
    hashed here."""
    data = cfg.data
    what = [data.url, data.md5, str(data.synthetic_seed), cfg.storage.root_uri, cfg.images.tag]
    rest = hashlib.sha256("|".join(what).encode()).hexdigest()[:12]
    source = "sprig.sha256sum(workflow.parameters['data-source'])"
    return f"stage-{rest}-{{{{=sprig.trunc(16, {source})}}}}"
