"""The optimize image's two steps: ``optimize`` (every variant of the trained model, each
gated against it) and ``benchmark`` (every variant timed; the report as artifacts, the
registry's decision as outputs). Both run on ``cluster.optimize_gpus``."""

from __future__ import annotations

from collections.abc import Sequence

from hera.workflows import Container

from flows.manifests.shared_pod import OUTPUTS_DIR
from flows.pipeline.memo_keys import max_age_input, memoize
from flows.pipeline.parameters import input_ref
from flows.pipeline.reuse_templates import given, ran_here
from flows.pipeline.step_template import container_step, file_output, report_artifact
from steps.common.config import PipelineConfig

MODEL_ARGS = ["--model", input_ref("model-uri")]
OPTIMIZED_ARGS = ["--optimized", input_ref("optimized-uri")]
DATASET_ARGS = ["--dataset", input_ref("dataset-uri")]
RUN_ARGS = ["--mlflow-run-id", input_ref("run-id"), "--outputs-dir", OUTPUTS_DIR]
# the registry's decision, as outputs; with the image that serves the version (deploy's)
# and the previous one's (rollback-apply's)
DECISION = (
    "promoted",
    "model-version",
    "previous-version",
    "serving-image",
    "previous-serving-image",
)


def optimize_template(
    cfg: PipelineConfig, settings: Sequence[str], *, source_keys: bool = False
) -> Container:
    """``optimize``: every variant of the trained model, each gated against it; memoized
    (flows/pipeline/memo_keys.py; ``source_keys``: by its source, as a local run)."""
    return container_step(
        cfg,
        name="optimize",
        image="optimize",
        module="steps.optimize",
        args=[*MODEL_ARGS, *DATASET_ARGS, "--output", input_ref("optimized-uri"), *RUN_ARGS],
        settings=settings,
        inputs=[
            "model-uri",
            "dataset-uri",
            "optimized-uri",
            "run-id",
            max_age_input(cfg, "optimize"),
        ],
        outputs=[file_output("optimized", "optimized_uri"), *ran_here(run_id=True)],
        gpus=cfg.cluster.optimize_gpus,
        memoize=memoize(cfg, "optimize", source=source_keys),
    )


def benchmark_template(
    cfg: PipelineConfig, settings: Sequence[str], *, source_keys: bool = False
) -> Container:
    """``benchmark``: every variant timed; the report as artifacts, the registry's decision
    (``promoted``, the versions) and where the report is (``report-uri``) as outputs;
    memoized (flows/pipeline/memo_keys.py)."""
    report = [
        report_artifact("report", "report.md"),
        report_artifact("benchmark", "benchmark.json"),
    ]
    decision = [file_output(n, n) for n in DECISION]
    return container_step(
        cfg,
        name="benchmark",
        image="optimize",
        module="steps.benchmark",
        args=[
            *MODEL_ARGS,
            *OPTIMIZED_ARGS,
            *DATASET_ARGS,
            "--output",
            input_ref("output-uri"),
            *RUN_ARGS,
        ],
        settings=settings,
        inputs=[
            "model-uri",
            "optimized-uri",
            "dataset-uri",
            "output-uri",
            "run-id",
            max_age_input(cfg, "benchmark"),
        ],
        outputs=[
            *report,
            *decision,
            given("report-uri", input_ref("output-uri")),
            *ran_here(run_id=True),
        ],
        gpus=cfg.cluster.optimize_gpus,
        memoize=memoize(cfg, "benchmark", source=source_keys),
    )
