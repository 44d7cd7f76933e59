"""The pipeline's one configuration model, ``PipelineConfig``: every tunable a typed,
described field, by section (``sections``, ``cluster``, ``serving``); the rules that span
sections; and ``ConfigError``, how a bad config is reported (read by ``loader``)."""

from __future__ import annotations

from pydantic import Field

from steps.common.config.cluster import ClusterConfig, ImagesConfig, ScheduleConfig
from steps.common.config.fields import Section
from steps.common.config.sections import (
    BenchmarkConfig,
    DataConfig,
    OptimizeConfig,
    StorageConfig,
    TrackingConfig,
    TrainConfig,
)
from steps.common.config.serving import ServingConfig


class ConfigError(ValueError):
    """A config file or override is unreadable or invalid; the message names the field."""


class PipelineConfig(Section):
    data: DataConfig = Field(default_factory=DataConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    optimize: OptimizeConfig = Field(default_factory=OptimizeConfig)
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    images: ImagesConfig = Field(default_factory=ImagesConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    serving: ServingConfig = Field(default_factory=ServingConfig)

    def processes_per_node(self) -> int:
        """Training processes per node (the job's ``nprocPerNode``, the TrainJob's
        ``numProcPerNode``, the ``nproc-per-node`` parameter): ``train.nproc_per_node``, or
        for ``auto`` one per GPU (else 1); at most one per GPU where the pod asks for GPUs."""
        nproc, gpus = self.train.nproc_per_node, self.cluster.gpus_per_node
        if nproc == "auto":
            return max(gpus, 1)
        if gpus and nproc > gpus:
            raise ConfigError(
                f"train.nproc_per_node {nproc} > cluster.gpus_per_node {gpus}: at most one "
                "process per GPU; lower train.nproc_per_node or use auto"
            )
        return nproc
