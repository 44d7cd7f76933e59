"""What the training step writes to the model URI: checkpoints (what one holds, writing it,
finding the newest intact one and resuming from it) and, at the end, the model itself.

Checkpoints: ``<model>/checkpoints/epoch-NNNN.pt`` (model, optimizer, scheduler, RNG,
epoch, progress, history) and then ``epoch-NNNN.json`` with its sha256. The sidecar is
written last, so a checkpoint without one is incomplete and ignored; one whose bytes do not
match it, or that does not load, is reported and the previous one is used instead.

The model: ``weights.pt`` (a CPU state dict) and then ``model.json``, which publishes it.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import torch

from steps.common.config import TrainConfig
from steps.common.models import CIFAR10_MEAN, CIFAR10_STD, INPUT_SHAPE
from steps.common.storage import StorageError, Store
from steps.common.weights import WeightsError, load_weights
from steps.train.data import Dataset
from steps.train.distributed import Dist, broadcast_object

CHECKPOINTS = "checkpoints"
_SIDECAR = re.compile(rf"^{CHECKPOINTS}/epoch-(\d+)\.json$")


@dataclass
class Progress:
    """How far training has come, over all attempts: saved in every checkpoint."""

    epoch: int = 0  # epochs done
    train_seconds: float = 0.0  # training loops only
    time_to_target_s: float | None = None  # set once train.target_accuracy is reached
    history: list[dict[str, float]] = field(default_factory=list)  # one entry per epoch


def training_state(
    epoch: int, identity: dict[str, Any], modules: dict[str, Any], progress: Progress
) -> dict[str, Any]:
    """What a checkpoint holds after ``epoch``; ``resume`` reads it back."""
    state = {"epoch": epoch, "identity": identity, "rng": rng_state()}
    state |= {name: module.state_dict() for name, module in modules.items()}
    figures = {
        "epoch": progress.epoch,
        "train_seconds": progress.train_seconds,
        "time_to_target_s": progress.time_to_target_s,
    }
    return state | {"progress": figures, "history": progress.history}


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_key(epoch: int, suffix: str = "pt") -> str:
    return f"{CHECKPOINTS}/epoch-{epoch:04d}.{suffix}"


def checkpoint_epochs(store: Store) -> list[int]:
    """Epochs with a complete (sidecar-published) checkpoint, newest first."""
    found = (_SIDECAR.match(key) for key in store.list(CHECKPOINTS))
    return sorted((int(m.group(1)) for m in found if m), reverse=True)


def save_checkpoint(store: Store, epoch: int, state: dict[str, Any], keep: int) -> str:
    """Write the checkpoint, then its sidecar; delete all but the newest ``keep``."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    store.write_bytes(checkpoint_key(epoch), data)
    sidecar = {
        "epoch": epoch,
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    store.write_bytes(checkpoint_key(epoch, "json"), json.dumps(sidecar).encode())
    for old in checkpoint_epochs(store)[keep:]:
        store.delete(checkpoint_key(old, "json"))  # unpublish first, then drop the data
        store.delete(checkpoint_key(old))
    return store.uri(checkpoint_key(epoch))


def load_checkpoint(store: Store, epoch: int) -> dict[str, Any]:
    """One checkpoint, verified against its sidecar; ValueError says what is wrong."""
    try:
        sidecar = json.loads(store.read_bytes(checkpoint_key(epoch, "json")))
        data = store.read_bytes(checkpoint_key(epoch))
    except (StorageError, ValueError) as exc:
        raise ValueError(str(exc)) from None
    if hashlib.sha256(data).hexdigest() != sidecar.get("sha256"):
        raise ValueError(
            f"sha256 differs from the sidecar's; {len(data)} bytes, truncated or damaged"
        )
    try:
        state = load_weights(data, checkpoint_key(epoch))
    except WeightsError as exc:
        raise ValueError(f"does not load: {str(exc).split(': ', 1)[1]}") from None
    if not isinstance(state, dict) or state.get("epoch") != epoch:
        raise ValueError("not a checkpoint of this trainer")
    return state


def newest_checkpoint(
    store: Store, say: Callable[[str], None]
) -> tuple[int, dict[str, Any]] | None:
    """The newest checkpoint that verifies and loads; say why each newer one was skipped."""
    for epoch in checkpoint_epochs(store):
        try:
            return epoch, load_checkpoint(store, epoch)
        except ValueError as exc:
            say(
                f"checkpoint {store.uri(checkpoint_key(epoch))} is unusable ({exc}); "
                "falling back to the previous one"
            )
    return None


class CheckpointMismatch(ValueError):
    """The output URI holds checkpoints of a different model or dataset (a user error)."""


def resume(
    store: Store,
    d: Dist,
    identity: dict[str, Any],
    modules: dict[str, Any],
    say: Callable[[str], None],
) -> Progress | None:
    """Restore ``modules`` (model, optimizer, scheduler: anything with load_state_dict) and
    the RNG from the newest intact checkpoint; rank 0 picks it, every rank loads the same
    one. Returns the checkpoint's progress, or None for a fresh start."""
    found = newest_checkpoint(store, say) if d.is_main else None
    epoch = broadcast_object(found[0] if found else None, d)
    if epoch is None:
        return None
    where = store.uri(checkpoint_key(epoch))
    try:
        state = found[1] if found else load_checkpoint(store, epoch)
    except ValueError as exc:
        raise StorageError(f"{where}: {exc}") from None
    if state.get("identity") != identity:
        raise CheckpointMismatch(
            f"{where} was trained with {state.get('identity')}, not {identity}; "
            "use another --output or delete its checkpoints/"
        )
    for name, module in modules.items():
        module.load_state_dict(state[name])
    set_rng_state(state["rng"])
    return Progress(**state["progress"], history=state["history"])


# --- the model ---------------------------------------------------------------------------
def model_meta(
    hp: TrainConfig, data: Dataset, dataset_uri: str, test_accuracy: float, epochs: int
) -> dict[str, Any]:
    """``model.json``: what the optimize, benchmark and predict steps need to rebuild it."""
    return {
        "architecture": hp.model,
        "num_classes": len(data.classes),
        "classes": data.classes,
        "mean": list(CIFAR10_MEAN),
        "std": list(CIFAR10_STD),
        "input_shape": list(INPUT_SHAPE),
        "dataset_uri": dataset_uri,
        "dataset_digest": data.digest,
        "test_accuracy": test_accuracy,
        "epochs": epochs,
        "width": hp.width,  # build_model(architecture, num_classes, width)
    }


def write_model(store: Store, model: torch.nn.Module, meta: dict[str, Any]) -> None:
    """``weights.pt`` (CPU state dict), then ``model.json``, which publishes the model."""
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
    store.write_bytes("weights.pt", buffer.getvalue())
    store.write_bytes("model.json", json.dumps(meta, indent=2).encode())
