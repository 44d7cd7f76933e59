"""The pipeline's one configuration model: ``PipelineConfig`` and its errors
(``pipeline``), the sections (``sections``, ``cluster``, ``serving``), the field types they
share (``fields``), and ``load_config`` (``loader``)."""

from steps.common.config.cluster import ClusterConfig, ImagesConfig, ScheduleConfig
from steps.common.config.loader import (
    DEFAULT_CONFIG_PATH,
    REPO_ROOT,
    describe,
    dump_config,
    flatten,
    load_config,
    with_overrides,
)
from steps.common.config.pipeline import ConfigError, PipelineConfig
from steps.common.config.sections import (
    CIFAR10_MD5,
    CIFAR10_URL,
    BenchmarkConfig,
    DataConfig,
    ExtraVariant,
    OptimizeConfig,
    StorageConfig,
    TrackingConfig,
    TrainConfig,
)
from steps.common.config.serving import ServingConfig

__all__ = [
    "CIFAR10_MD5",
    "CIFAR10_URL",
    "DEFAULT_CONFIG_PATH",
    "REPO_ROOT",
    "BenchmarkConfig",
    "ClusterConfig",
    "ConfigError",
    "DataConfig",
    "ExtraVariant",
    "ImagesConfig",
    "OptimizeConfig",
    "PipelineConfig",
    "ScheduleConfig",
    "ServingConfig",
    "StorageConfig",
    "TrackingConfig",
    "TrainConfig",
    "describe",
    "dump_config",
    "flatten",
    "load_config",
    "with_overrides",
]
