"""The training step's process group, checkpoints and model outputs.

Ranks: ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` as torchrun (or the Training Operator,
for a pod per process) sets them; none set is one process. gloo on CPU, NCCL on GPU.

Checkpoints: ``<model>/checkpoints/epoch-NNNN.pt`` (model, optimizer, scheduler, RNG,
epoch, history) and then ``epoch-NNNN.json`` with its sha256. The sidecar is written
last, so a checkpoint without one is incomplete and ignored; one whose bytes do not match
it, or that does not load, is reported and the previous one is used instead.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import torch
import torch.distributed as dist

from steps.common.models import CIFAR10_MEAN, CIFAR10_STD, INPUT_SHAPE
from steps.common.storage import StorageError, Store
from steps.common.weights import WeightsError, load_weights

CHECKPOINTS = "checkpoints"
_SIDECAR = re.compile(rf"^{CHECKPOINTS}/epoch-(\d+)\.json$")


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def setup_distributed() -> Dist:
    """Join the process group the environment describes; pick this rank's device."""
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
    return Dist(rank, world_size, local_rank, device)


def teardown_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor, d: Dist) -> torch.Tensor:
    if d.distributed:
        dist.all_reduce(tensor)
    return tensor


def broadcast_object(obj: Any, d: Dist) -> Any:
    """Rank 0's value of ``obj`` on every rank."""
    if not d.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(d: Dist) -> None:
    if d.distributed:
        dist.barrier()


def average_buffers(model: torch.nn.Module, d: Dist) -> None:
    """Average BatchNorm running statistics over ranks: each rank saw other batches."""
    if not d.distributed:
        return
    for buffer in model.buffers():
        if buffer.is_floating_point():
            dist.all_reduce(buffer)
            buffer.div_(d.world_size)


def state_checksum(model: torch.nn.Module) -> str:
    """sha256 over the state dict's names and bytes: equal on ranks with equal weights."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


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
) -> dict[str, Any] | None:
    """Restore ``modules`` (model, optimizer, scheduler: anything with load_state_dict) from
    the newest intact checkpoint; rank 0 picks it, every rank loads the same one. Returns
    the checkpoint (its ``progress`` and ``history``), or None for a fresh start."""
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
    return state


def model_meta(hp, data, dataset_uri: str, test_accuracy: float, epochs: int) -> dict[str, Any]:
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
