"""The training step's test hooks, handed to it by the tests (``steps.train.step``'s
``--hooks tests.helpers.train_hooks:TestHooks --hook-arg stop_after=1``, which reaches every rank
under torchrun, or ``run(args, TestHooks(...))`` in process):

- ``stop_after=k``: stop after epoch k (exit 3), once its checkpoint is written, as a
  killed job would;
- ``debug_dir=DIR``: each rank writes ``DIR/rank-N.json`` with its weights' sha256 and the
  epoch it started from, so a test can compare the ranks.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from steps.common.storage import LocalStore
from steps.train.distributed import Dist, barrier
from steps.train.fit import Hooks, StopRequested

HOOKS = "tests.helpers.train_hooks:TestHooks"  # what --hooks names


def hook_args(**values: object) -> list[str]:
    """``--hooks`` and its ``--hook-arg`` pairs for a command line."""
    pairs = [arg for key, value in values.items() for arg in ("--hook-arg", f"{key}={value}")]
    return ["--hooks", HOOKS, *pairs]


@dataclass(frozen=True)
class TestHooks(Hooks):
    __test__ = False  # a helper, not a test class for pytest to collect

    stop_after: int | str = 0  # 0: never; a string from the command line
    debug_dir: Path | str | None = None

    def after_epoch(self, epoch: int, last: bool, d: Dist) -> None:
        if int(self.stop_after) == epoch and not last:
            barrier(d)  # the other ranks wait for rank 0's checkpoint before exiting
            raise StopRequested(f"stopped after epoch {epoch} (the test's stop hook)")

    def at_end(self, model: torch.nn.Module, start_epoch: int, d: Dist) -> None:
        if self.debug_dir is None:
            return
        debug = {"rank": d.rank, "weights_sha256": state_checksum(model)}
        LocalStore(Path(self.debug_dir)).write_bytes(
            f"rank-{d.rank}.json", json.dumps({**debug, "start_epoch": start_epoch}).encode()
        )


def state_checksum(model: torch.nn.Module) -> str:
    """sha256 over the state dict's names and bytes: equal on ranks with equal weights."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()
