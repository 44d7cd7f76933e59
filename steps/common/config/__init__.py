"""The pipeline's one configuration model: the sections (``sections``, ``cluster``), the
field types they share (``fields``), and ``load_config`` with its errors (``loader``)."""

from steps.common.config.cluster import ClusterConfig, ImagesConfig, ScheduleConfig
from steps.common.config.loader import (
    DEFAULT_CONFIG_PATH,
    REPO_ROOT,
    ConfigError,
    PipelineConfig,
    describe,
    dump_config,
    flatten,
    load_config,
)
from steps.common.config.sections import (
    CIFAR10_MD5,
    CIFAR10_URL,
    BenchmarkConfig,
    DataConfig,
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
]
