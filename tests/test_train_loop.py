"""The trainer's loop at the hardware's pace (issue 42 item 3): nothing in a step waits for
the device, and the loop computes what the loop before it computed.

- **No host synchronisation per step.** On CUDA the host blocks where it reads a device
  value (``.item()``, ``bool()``, ``.tolist()``, ``.cpu()``: ``aten._local_scalar_dense``
  or a copy back), where it copies pageable host memory to the device (``.to(device)``
  waits for the stream), and in the ops whose output size depends on the data
  (``nonzero``, ``bincount``, ``masked_select``, boolean masks, ``unique``). The CPU has no
  stream to wait for, so the tests count those *calls* on the CPU path, the stand-in for
  CUDA: a ``TorchFunctionMode`` sees every Python-level read and device transfer, a
  ``TorchDispatchMode`` every aten op the loop dispatches, and an epoch of 5 steps must
  make exactly the calls an epoch of 2 makes (none per step). The loop of before, kept
  here as a reference, fails that check (two transfers a step, ``bincount`` a test batch).
  What it cannot see: syncs inside CUDA-only code with no CPU counterpart (cuDNN's
  benchmark search, the caching allocator under memory pressure); ``benchmarks/gpu.py``
  counts those on a GPU with CUDA's sync debug mode, and the CUDA test here does too.
- **The same results.** The reference is the loop as it was before (main at 60bed96:
  ``train_one_epoch`` with the shifts and flips drawn and copied step by step, ``evaluate``
  counting the confusion matrix by ``bincount``, non-fused SGD), copied below. Both run
  from the same initial weights on the same data: the batches are identical bit for bit
  (the epoch's draws are taken in the same order), the confusion matrix of the same
  weights is identical, and the weights after two epochs agree within the rounding fused
  SGD's kernel differs by (one ulp an update).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.learnable_data import learnable_cifar
from steps.common.config import TrainConfig
from steps.train.data import Batches, crop_flip, epoch_order
from steps.train.distributed import Dist
from steps.train.loop import (
    EVAL_BATCH,
    Training,
    build_training,
    evaluate,
    one_cycle,
    train_one_epoch,
)

CPU = Dist(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


# --- the loop before (main at 60bed96), the reference ---------------------------------------
class ReferenceBatches(Batches):
    """``Batches.epoch`` as it was: each step draws its shifts and flips and copies them to
    the device."""

    def augment(self, index: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        n, p, device = len(index), self.padding, self.images.device
        shifts = torch.randint(-p, p + 1, (n, 2), generator=generator).to(device)
        flips = (torch.rand(n, generator=generator) < 0.5).to(device) & self.flip
        return crop_flip(self.images, index, shifts, flips)

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = epoch_order(len(self.images), self.global_batch, self.seed, epoch)
        start = self.rank * self.local_batch
        mine = order[:, start : start + self.local_batch].to(self.images.device)
        generator = torch.Generator().manual_seed(
            (self.seed * 1_000_003 + epoch) * 4099 + self.rank
        )
        for index in mine:
            yield self.normalize(self.augment(index, generator)), self.labels[index]


def reference_train_one_epoch(model, batches, epoch, optimizer, scheduler, criterion, autocast):
    model.train()
    loss_sum = torch.zeros((), device=batches.images.device)
    correct = torch.zeros((), device=batches.images.device, dtype=torch.long)
    seen = 0
    for images, labels in batches.epoch(epoch):
        with autocast():
            logits = model(images)
            loss = criterion(logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        loss_sum += loss.detach().float() * len(labels)
        correct += (logits.detach().argmax(1) == labels).sum()
        seen += len(labels)
    return torch.stack(
        [loss_sum.double(), correct.double(), torch.tensor(seen).double().to(loss_sum.device)]
    )


@torch.no_grad()
def reference_evaluate(model, batches, num_classes, autocast):
    model.eval()
    device = batches.images.device
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    confusion = torch.zeros(num_classes * num_classes, device=device, dtype=torch.long)
    for images, labels in batches.ordered(EVAL_BATCH):
        with autocast():
            logits = model(images).float()
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").double()
        confusion += torch.bincount(
            labels * num_classes + logits.argmax(1), minlength=num_classes**2
        )
    matrix = confusion.view(num_classes, num_classes)
    sums = torch.stack([loss_sum, matrix.diagonal().sum().double(), confusion.sum().double()])
    return sums, matrix.double()


def reference_training(hp: TrainConfig, data) -> Training:
    """The same set-up (same initial weights: build_training seeds them) with the loop of
    before's batches and its non-fused SGD."""
    t = build_training(hp, data, CPU)
    t.train_batches = ReferenceBatches(
        data.train_images, data.train_labels, global_batch=hp.batch_size, seed=hp.seed,
        crop_padding=hp.crop_padding, channels_last=hp.channels_last,
    )  # fmt: skip
    t.optimizer = torch.optim.SGD(
        t.raw.parameters(), lr=hp.lr, momentum=hp.momentum, nesterov=True,
        weight_decay=hp.weight_decay,
    )  # fmt: skip
    steps = t.train_batches.steps_per_epoch
    warmup = min(round(hp.warmup_epochs * steps), hp.epochs * steps - 1)
    t.scheduler = torch.optim.lr_scheduler.LambdaLR(
        t.optimizer, one_cycle(hp.epochs * steps, warmup)
    )
    return t


def reference_epoch(t: Training, epoch: int) -> torch.Tensor:
    return reference_train_one_epoch(
        t.model, t.train_batches, epoch, t.optimizer, t.scheduler, t.criterion, t.autocast
    )


# --- counting what would wait for a CUDA device ---------------------------------------------
HOST_READS = {
    "item", "tolist", "cpu", "numpy", "cuda", "__bool__", "__int__", "__float__", "__index__",
}  # fmt: skip
DATA_DEPENDENT = {
    "_local_scalar_dense", "nonzero", "bincount", "masked_select", "unique", "_unique",
    "_unique2", "unique_consecutive", "unique_dim", "repeat_interleave", "equal",
    "is_nonzero", "histc",
}  # fmt: skip


def moves_data(name: str, args: tuple, kwargs: dict) -> bool:
    """``Tensor.to(device)`` / ``.to(other)``, or a tensor made on a device from host data."""
    if name == "to":
        targets = [*args[1:], kwargs.get("device")]
        return any(isinstance(a, (torch.device, str, torch.Tensor)) for a in targets)
    return name in ("tensor", "as_tensor") and kwargs.get("device") is not None


class HostCalls(TorchFunctionMode):
    """Counts the Python-level calls that read the device or move host data to it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in HOST_READS:
            self.calls[f"Tensor.{name}"] += 1
        elif moves_data(name, args, kwargs):
            self.calls[f"{name}(device)"] += 1
        return func(*args, **kwargs)


class DataDependentOps(TorchDispatchMode):
    """Counts the aten ops that, on CUDA, read a device value on the host."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in DATA_DEPENDENT or (name == "index" and any_bool_index(args)):
            self.calls[f"aten.{name}"] += 1
        return func(*args, **(kwargs or {}))


def any_bool_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else []
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


def waits(work: Callable[[], object]) -> Counter[str]:
    """Every call in ``work`` that would make the host wait for a CUDA device."""
    python, aten = HostCalls(), DataDependentOps()
    with python, aten:
        work()
    return python.calls + aten.calls


# --- data and set-ups -------------------------------------------------------------------------
@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """One thread, as torchrun's ranks use: on a shared 2-core machine two OpenMP threads
    that must wait for each other run many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data():
    return learnable_cifar(384, 192, torch.device("cpu"), seed=5)


def settings(model: str, **changes) -> TrainConfig:
    fields = {"model": model, "width": 8, "epochs": 2, "batch_size": 64, "lr": 0.1,
              "warmup_epochs": 0.5, "amp_bf16_cpu": False}  # fmt: skip
    return TrainConfig(**(fields | changes))


def with_images(data, n: int):
    """``data`` with its first ``n`` training images only (n / 64 steps an epoch)."""
    return type(data)(**{**data.__dict__, "train_images": data.train_images[:n],
                         "train_labels": data.train_labels[:n]})  # fmt: skip


def test_an_epoch_makes_no_call_that_waits_for_the_device_per_step(data) -> None:
    """2 steps and 5 steps make the same calls: the three transfers of the epoch's order,
    shifts and flips, once. The loop of before makes two more a step."""
    hp = settings("simplecnn")
    per_epoch = {}
    for steps in (2, 5):
        t = build_training(hp, with_images(data, 64 * steps), CPU)
        per_epoch[steps] = waits(lambda t=t: train_one_epoch(t, 0))
    assert per_epoch[2] == per_epoch[5] == Counter({"to(device)": 3}), per_epoch

    before = {}
    for steps in (2, 5):
        t = reference_training(hp, with_images(data, 64 * steps))
        before[steps] = waits(lambda t=t: reference_epoch(t, 0))
    assert before[5]["to(device)"] - before[2]["to(device)"] == 2 * 3, before  # caught


def test_evaluation_makes_no_call_that_waits_for_the_device_per_batch(data) -> None:
    """One test batch or three: no call that waits. The evaluation of before counted its
    confusion matrix by ``bincount``, which reads its input's maximum: once a batch."""
    t = build_training(settings("simplecnn"), data, CPU)

    def shard(batches: int) -> Batches:
        n = batches * EVAL_BATCH
        return Batches(torch.zeros(n, 32, 32, 3, dtype=torch.uint8),
                       torch.arange(n) % 10, global_batch=64)  # fmt: skip

    shards = {batches: shard(batches) for batches in (1, 3)}
    for batches in shards.values():
        assert waits(lambda b=batches: evaluate(t.raw, b, 10, contextlib.nullcontext)) == Counter()
    before = waits(lambda: reference_evaluate(t.raw, shards[3], 10, contextlib.nullcontext))
    assert before["aten.bincount"] == 3, before  # caught


def test_the_counter_sees_each_kind_of_wait() -> None:
    x = torch.arange(6.0)
    seen = waits(lambda: (x.sum().item(), bool(x[0]), x.tolist(), x[x > 2], x.to("cpu")))
    assert seen["Tensor.item"] == 1 and seen["Tensor.__bool__"] == 1
    assert seen["Tensor.tolist"] == 1 and seen["to(device)"] == 1
    assert seen["aten.index"] == 1 and seen["aten._local_scalar_dense"] >= 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_an_epoch_runs_with_synchronising_calls_refused() -> None:
    cuda = Dist(0, 1, 0, torch.device("cuda"))
    gpu_data = learnable_cifar(640, 128, cuda.device)
    t = build_training(settings("resnet9", amp_bf16=True), gpu_data, cuda)
    train_one_epoch(t, 0)  # cuDNN's benchmark search and the allocator's first blocks
    evaluate(t.raw, t.test_batches, t.num_classes, t.autocast)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        sums = train_one_epoch(t, 1)
        test_sums, _ = evaluate(t.raw, t.test_batches, t.num_classes, t.autocast)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert sums[2].item() == 640 and test_sums[2].item() == 128


# --- the same results as before ---------------------------------------------------------------
@pytest.mark.parametrize("model", ["simplecnn", "resnet9"])
def test_two_epochs_give_what_the_loop_before_gave(data, model: str) -> None:
    hp = settings(model)
    ours, before = build_training(hp, data, CPU), reference_training(hp, data)
    assert ours.optimizer.defaults["fused"] and not before.optimizer.defaults["fused"]
    for a, b in zip(ours.train_batches.epoch(1), before.train_batches.epoch(1), strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])  # the same batches
    for epoch in range(hp.epochs):
        sums, reference = train_one_epoch(ours, epoch), reference_epoch(before, epoch)
        torch.testing.assert_close(sums, reference, rtol=1e-4, atol=0)
        assert sums[1:].tolist() == reference[1:].tolist()  # correct, images: counted alike
    for (name, mine), theirs in zip(ours.raw.state_dict().items(),
                                    before.raw.state_dict().values(), strict=True):  # fmt: skip
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5, msg=name)
    same = (before.raw, before.test_batches, 10, contextlib.nullcontext)
    (test, confusion), (ref_test, ref_confusion) = evaluate(*same), reference_evaluate(*same)
    assert torch.equal(confusion, ref_confusion) and torch.equal(test, ref_test)


def test_the_same_draws_make_the_same_epoch_for_every_rank(data) -> None:
    """The epoch's draws taken at once are the draws the steps took one by one, on each
    rank of two (each has its own stream: seed, epoch and rank)."""
    for rank in (0, 1):
        shard = {"global_batch": 64, "rank": rank, "world_size": 2, "seed": 3}
        ours = Batches(data.train_images, data.train_labels, **shard)
        before = ReferenceBatches(data.train_images, data.train_labels, **shard)
        for a, b in zip(ours.epoch(2), before.epoch(2), strict=True):
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
