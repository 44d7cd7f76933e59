"""The staging step: the dataset into the artifact store, memoized by what is staged.

What to stage and where come from the config (``data.source``, ``storage.root_uri``,
``data.md5``) in the step's ``--set`` arguments, as every step's settings do. Its key
(flows/pipeline/memo_keys.py) holds the data image, the data settings and the ``data-source``
parameter; the staged dataset is content-addressed, so a run of it again after a dead hit
writes the same URI.
"""

from __future__ import annotations

from hera.workflows import Container

from flows.manifests.shared_pod import OUTPUTS_DIR
from flows.pipeline.memo_keys import max_age_input, memoize
from flows.pipeline.reuse_templates import ran_here
from flows.pipeline.step_template import container_step, file_output
from steps.common.config import PipelineConfig


def stage_template(
    cfg: PipelineConfig, settings: list[str], *, source_keys: bool = False
) -> Container:
    """``stage``: ``python -m steps.stage_data`` with the config alone, memoized
    (``source_keys``: the key names the step's source, as a local run does)."""
    outputs = [
        file_output(name, name.replace("-", "_"))
        for name in ("dataset-uri", "digest", "num-train", "num-test")
    ]
    return container_step(
        cfg,
        name="stage",
        image="data",
        module="steps.stage_data",
        args=["--outputs-dir", OUTPUTS_DIR],
        settings=settings,
        outputs=[*outputs, *ran_here()],
        memoize=memoize(cfg, "stage", source=source_keys),
        inputs=[max_age_input(cfg, "stage")],
    )
