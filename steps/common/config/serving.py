"""The ``serving`` section: where the champion is served (a KServe InferenceService on the
cluster, a local process here), how the server batches, and what the live check sends."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from steps.common.config.fields import KubeName, Quantity, Section


class ServingConfig(Section):
    enabled: bool = Field(
        True, description="deploy the champion and check it live when the benchmark moved it"
    )
    name: KubeName = Field("cifar10-classifier", description="InferenceService name")
    min_replicas: int = Field(1, ge=0, description="predictor replicas at least (1 or more)")
    max_replicas: int = Field(1, ge=1, description="predictor replicas at most")
    cpu: Quantity = Field("1", description="CPU request and limit of a predictor pod")
    memory: Quantity = Field("2Gi", description="memory request and limit of a predictor pod")
    gpus: int = Field(0, ge=0, description="nvidia.com/gpu of a predictor pod (0: none)")
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="nodeSelector of the predictor pods"
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, description="tolerations of the predictor pods"
    )
    port: int = Field(8080, ge=1, le=65535, description="port the server listens on")
    max_batch: int = Field(
        64, ge=1, description="images the server runs at once, concurrent requests batched"
    )
    max_delay_ms: float = Field(
        2.0, ge=0, description="how long a request waits for others to batch with it"
    )
    inline_max_images: int = Field(
        1,
        ge=0,
        description="a request of at most this many images that arrives while no other is "
        "held runs at once on the event loop's thread, without the handoff to the inference "
        "thread and back; 0: never",
    )
    max_request_images: int = Field(
        1024, ge=1, description="images one request may carry; more is refused (413)"
    )
    linger_max_bytes: int | None = Field(
        None,
        ge=0,
        description="after a refusal answered before its body was read whole (413, a "
        "hostile body), the bytes of that body the server still reads and drops so the "
        "client, still sending, reads the answer instead of a connection reset (as nginx's "
        "lingering close); null: twice the largest body it takes (serving."
        "max_request_images images as JSON), so a client that sends a body up to that size "
        "whole before it reads still reads the refusal; 0: close at once",
    )
    linger_time_s: float = Field(
        30.0,
        ge=0,
        description="how long in all the server reads and drops a refused body's rest before "
        "it closes the connection (nginx's lingering_time)",
    )
    linger_timeout_s: float = Field(
        5.0,
        gt=0,
        description="how long the server waits for more of a refused body's bytes before it "
        "closes the connection (nginx's lingering_timeout)",
    )
    check_concurrency: list[int] = Field(
        default_factory=lambda: [1, 8], description="concurrent clients the live check uses"
    )
    check_protocol: Literal["auto", "v2", "mlflow"] = Field(
        "auto",
        description="what the live check speaks: v2, the Open Inference Protocol with binary "
        "tensors (python -m steps.serve, KServe's clients); mlflow, /invocations (mlflow "
        "models serve); auto: v2 where the server declares it at GET /v2",
    )
    check_samples: int | None = Field(
        None, ge=1, description="test images the live check sends; null: the whole test split"
    )
    ready_timeout_s: float = Field(
        600.0, gt=0, description="how long the deployment may take to become ready"
    )

    @field_validator("min_replicas")
    @classmethod
    def _no_scale_to_zero(cls, value: int) -> int:
        # KServe v0.19.0's Standard mode scales the predictor's Deployment with an HPA whose
        # minReplicas is at least 1 (pkg/controller/v1beta1/inferenceservice/reconcilers/hpa/
        # hpa_reconciler.go createHPA: below constants.DefaultMinReplicas it takes 1); only
        # the "none" autoscaler class would set 0 replicas, which serves nothing at all.
        if value == 0:
            raise ValueError(
                "0: KServe in Standard mode never scales to zero (its HPA keeps at least 1 "
                "replica; scale to zero needs Knative or KEDA, which configs/cluster does "
                "not install): use 1 or more"
            )
        return value

    @field_validator("check_concurrency")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if not value or any(c < 1 for c in value):
            raise ValueError(f"{value}: give one or more concurrencies, each at least 1")
        return value

    @model_validator(mode="after")
    def _replicas(self) -> ServingConfig:
        if self.max_replicas < self.min_replicas:
            raise ValueError(
                f"serving.max_replicas {self.max_replicas} < serving.min_replicas "
                f"{self.min_replicas}"
            )
        return self
