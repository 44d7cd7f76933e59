"""What the training step records in MLflow (rank 0 only): params, dataset input, per-epoch
metrics, plots, the model with its signature. Plots are drawn with matplotlib's Agg
backend, so no display is needed in a pod.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import mlflow
import numpy as np
import torch
from mlflow.models.signature import ModelSignature
from mlflow.types import Schema, TensorSpec

from steps.common.config import PipelineConfig, flatten
from steps.common.pipeline_run import TrackedRun
from steps.train.checkpoints import Progress
from steps.train.data import Dataset

# MLflow's dataset digest column holds 36 characters; the full sha256 goes in a tag.
MLFLOW_DIGEST_CHARS = 32


def log_start(tracked: TrackedRun, cfg: PipelineConfig, data: Dataset, model_uri: str) -> None:
    """Every config field as a param, the dataset as the run's training input."""
    tracked.log_params(flatten(cfg))
    mlflow.set_tags({"train.model_uri": model_uri, "train.dataset_uri": data.uri})
    features = data.train_images.cpu().numpy()  # MLflow records shape, dtype and profile
    with warnings.catch_warnings():  # file:// matches two source types; either is right
        warnings.simplefilter("ignore", UserWarning)
        dataset = mlflow.data.from_numpy(
            features,
            targets=data.train_labels.cpu().numpy(),
            source=data.uri,
            name=data.name,
            digest=data.digest[:MLFLOW_DIGEST_CHARS],
        )
    mlflow.log_input(
        dataset,
        context="training",
        tags={"sha256": data.digest, "train_images": str(len(data.train_labels))},
    )


def curves_figure(history: list[dict[str, float]]) -> plt.Figure:
    epochs = [h["epoch"] for h in history]
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("train_loss", "train"), ("test_loss", "test")):
        loss_ax.plot(epochs, [h[key] for h in history], marker="o", label=label)
    for key, label in (("train_accuracy", "train"), ("test_accuracy", "test")):
        acc_ax.plot(epochs, [h[key] for h in history], marker="o", label=label)
    loss_ax.set(title="loss", xlabel="epoch")
    acc_ax.set(title="accuracy", xlabel="epoch", ylim=(0, 1))
    for ax in (loss_ax, acc_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return fig


def confusion_figure(confusion: np.ndarray, classes: list[str]) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(7, 6))
    image = ax.imshow(confusion, cmap="Blues")
    ax.set_xticks(range(len(classes)), classes, rotation=45, ha="right")
    ax.set_yticks(range(len(classes)), classes)
    ax.set(xlabel="predicted", ylabel="true", title="confusion matrix (test set)")
    limit = confusion.max() / 2 if confusion.size else 0
    for (i, j), count in np.ndenumerate(confusion):
        color = "white" if count > limit else "black"
        ax.text(j, i, str(count), ha="center", va="center", fontsize=7, color=color)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    return fig


def log_final(
    tracked: TrackedRun,
    model: torch.nn.Module,
    example: torch.Tensor,
    confusion: np.ndarray,
    meta: dict[str, Any],
    progress: Progress,
) -> str:
    """Final metrics, plots, model.json and the model (torch.export format: reloadable
    without this package); returns the logged model's URI."""
    final = {
        "final_test_accuracy": meta["test_accuracy"],
        "train_seconds": progress.train_seconds,
    }
    if progress.time_to_target_s is not None:
        final["time_to_target_s"] = progress.time_to_target_s
    tracked.log_metrics(final, step=progress.epoch)
    for name, fig in (
        ("plots/curves.png", curves_figure(progress.history)),
        ("plots/confusion_matrix.png", confusion_figure(confusion, meta["classes"])),
    ):
        mlflow.log_figure(fig, name)
        plt.close(fig)
    mlflow.log_dict(meta, "model/model.json")
    cpu_model = copy.deepcopy(model).to("cpu", memory_format=torch.contiguous_format).eval()
    example_np = example.detach().float().cpu().contiguous().numpy()
    classes = len(meta["classes"])
    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.float32), (-1, *meta["input_shape"]))]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, classes))]),
    )
    info = mlflow.pytorch.log_model(
        cpu_model,
        name="model",
        signature=signature,
        input_example=example_np,
        pip_requirements=[f"torch=={torch.__version__.split('+')[0]}"],
        step=int(meta["epochs"]),
    )
    mlflow.set_tag("train.logged_model_uri", info.model_uri)
    return info.model_uri
