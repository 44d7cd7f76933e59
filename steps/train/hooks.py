"""Test hooks, kept out of the training loop: the loop calls ``after_epoch`` once an epoch
is done (and checkpointed, when due), ``fit`` calls ``at_end`` once the model is written.
``Hooks`` does nothing; ``from_environment`` gives the hooks the tests ask for through
environment variables, which reach every rank under ``torchrun``:

- ``CIFAR_TRAIN_STOP_AFTER_EPOCH=k``: stop after epoch k (exit 3), as a killed job would;
- ``CIFAR_TRAIN_DEBUG_DIR=DIR``: each rank writes ``DIR/rank-N.json`` with its weights'
  sha256 and the epoch it started from, so a test can compare the ranks.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from steps.common.storage import LocalStore
from steps.train.distributed import Dist, barrier

STOP_AFTER_ENV = "CIFAR_TRAIN_STOP_AFTER_EPOCH"  # tests: exit 3 once epoch k is checkpointed
DEBUG_DIR_ENV = "CIFAR_TRAIN_DEBUG_DIR"  # tests: each rank writes rank-N.json (weights sha256)


class StopRequested(Exception):
    """The test-only stop flag fired after a checkpoint."""


class Hooks:
    """Called by the trainer at fixed points; these do nothing."""

    def after_epoch(self, epoch: int, last: bool, d: Dist) -> None:
        """``epoch`` (counted from 1) is done on this rank; ``last``: no epoch follows."""

    def at_end(self, model: torch.nn.Module, start_epoch: int, d: Dist) -> None:
        """Training is over and rank 0 has written the model."""


@dataclass(frozen=True)
class EnvironmentHooks(Hooks):
    stop_after: int = 0  # 0: never
    debug_dir: Path | None = None

    def after_epoch(self, epoch: int, last: bool, d: Dist) -> None:
        if self.stop_after == epoch and not last:
            barrier(d)  # the other ranks wait for rank 0's checkpoint before exiting
            raise StopRequested(f"stopped after epoch {epoch} ({STOP_AFTER_ENV})")

    def at_end(self, model: torch.nn.Module, start_epoch: int, d: Dist) -> None:
        if self.debug_dir is None:
            return
        debug = {"rank": d.rank, "weights_sha256": state_checksum(model)}
        LocalStore(self.debug_dir).write_bytes(
            f"rank-{d.rank}.json", json.dumps({**debug, "start_epoch": start_epoch}).encode()
        )


def from_environment() -> Hooks:
    """The hooks the environment asks for; ``Hooks()`` when it asks for none."""
    stop_after = int(os.environ.get(STOP_AFTER_ENV) or 0)
    debug_dir = os.environ.get(DEBUG_DIR_ENV)
    if not stop_after and not debug_dir:
        return Hooks()
    return EnvironmentHooks(stop_after, Path(debug_dir) if debug_dir else None)


def state_checksum(model: torch.nn.Module) -> str:
    """sha256 over the state dict's names and bytes: equal on ranks with equal weights."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()
