"""The trainer's parts on their own: networks, the tensor data path, the schedule and
checkpoints (no torchrun, no servers)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from steps.common.config import TrainConfig
from steps.common.device import cpu_bf16_features
from steps.common.models import ARCHITECTURES, build_model, count_parameters
from steps.common.storage import LocalStore
from steps.train.checkpoints import (
    checkpoint_epochs,
    checkpoint_key,
    load_checkpoint,
    newest_checkpoint,
    save_checkpoint,
)
from steps.train.data import Batches, crop_flip, epoch_order
from steps.train.loop import one_cycle, use_bf16_autocast


@pytest.mark.parametrize(
    ("name", "kwargs", "params"),
    [
        ("simplecnn", {}, 62_006),  # the seed articles' count
        ("resnet9", {}, 6_573_120),  # DAWNBench/airbench ResNet-9
        ("resnet9", {"width": 16}, 412_944),
    ],
)
def test_networks_have_the_published_sizes(name: str, kwargs: dict, params: int) -> None:
    model = build_model(name, 10, **kwargs).eval()
    assert count_parameters(model) == params
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_unknown_architecture_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=f"unknown architecture 'vgg'.*{ARCHITECTURES[0]}"):
        build_model("vgg")


def reference_crop_flip(images: np.ndarray, index, shifts, flips, pad: int) -> np.ndarray:
    """The textbook way: reflect-pad each image, cut the shifted window, mirror."""
    out = []
    for i, (dy, dx), flip in zip(index, shifts, flips, strict=True):
        padded = np.pad(images[i], ((0, 0), (pad, pad), (pad, pad)), mode="reflect")
        window = padded[:, pad + dy : pad + dy + 32, pad + dx : pad + dx + 32]
        out.append(window[:, :, ::-1] if flip else window)
    return np.stack(out)


@pytest.mark.parametrize("pad", [0, 2, 4])
def test_crop_flip_gather_matches_pad_crop_and_mirror(pad: int) -> None:
    generator = torch.Generator().manual_seed(pad)
    images = torch.randint(0, 256, (20, 32, 32, 3), dtype=torch.uint8, generator=generator)
    index = torch.randint(0, 20, (64,), generator=generator)
    shifts = torch.randint(-pad, pad + 1, (64, 2), generator=generator)
    flips = torch.rand(64, generator=generator) < 0.5
    ours = crop_flip(images, index, shifts, flips)
    nchw = images.permute(0, 3, 1, 2).numpy()
    expected = reference_crop_flip(nchw, index, shifts.tolist(), flips.tolist(), pad)
    assert ours.shape == (64, 3, 32, 32)
    assert ours.is_contiguous(memory_format=torch.channels_last)
    np.testing.assert_array_equal(ours.numpy(), expected)


def test_normalisation_uses_the_cifar_constants() -> None:
    images = torch.full((4, 32, 32, 3), 255, dtype=torch.uint8)
    batches = Batches(images, torch.zeros(4, dtype=torch.long), global_batch=4)
    ((x, _),) = batches.ordered(4)
    torch.testing.assert_close(
        x[0, :, 0, 0], torch.tensor([(1 - 0.4914) / 0.2470, (1 - 0.4822) / 0.2435,
                                     (1 - 0.4465) / 0.2616])
    )  # fmt: skip


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_ranks_split_each_global_batch_without_overlap(world_size: int) -> None:
    n, global_batch = 1000, 64
    labels = torch.arange(n)
    seen = []
    for rank in range(world_size):
        batches = Batches(
            torch.zeros(n, 32, 32, 3, dtype=torch.uint8), labels, global_batch=global_batch,
            rank=rank, world_size=world_size, seed=7,
        )  # fmt: skip
        seen.append(torch.stack([y for _, y in batches.epoch(3)]))
    order = epoch_order(n, global_batch, seed=7, epoch=3)
    assert torch.equal(torch.cat(seen, dim=1), order)  # step i: the ranks' union, in order
    assert len(set(order.flatten().tolist())) == (n // global_batch) * global_batch


def test_epoch_order_is_seeded_and_changes_every_epoch() -> None:
    first = epoch_order(500, 50, seed=1, epoch=0)
    assert torch.equal(first, epoch_order(500, 50, seed=1, epoch=0))
    assert not torch.equal(first, epoch_order(500, 50, seed=1, epoch=1))
    assert not torch.equal(first, epoch_order(500, 50, seed=2, epoch=0))


@pytest.mark.parametrize(
    ("total", "warmup", "peak_step"),
    [(100, 20, 20), (100, 0, 0), (10, 9, 9)],
)
def test_one_cycle_rises_linearly_then_falls_to_zero(total, warmup, peak_step) -> None:
    factor = one_cycle(total, warmup)
    values = [factor(step) for step in range(total + 1)]
    assert max(values) == pytest.approx(1.0) and values.index(max(values)) == peak_step
    rising, falling = values[: peak_step + 1], values[peak_step:]
    assert all(a < b for a, b in itertools.pairwise(rising))
    assert all(a >= b for a, b in itertools.pairwise(falling))
    assert values[-1] == 0.0


@pytest.mark.parametrize("setting", ["auto", True, False])
def test_bf16_autocast_on_cpu_follows_the_hardware_unless_set(setting) -> None:
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    hp = TrainConfig(amp_bf16_cpu=setting, amp_bf16=False)
    native = bool(cpu_bf16_features())  # AMX / AVX512-BF16 on this machine's CPU
    assert use_bf16_autocast(hp, cpu) is (native if setting == "auto" else setting)
    assert use_bf16_autocast(hp, gpu) is False  # the GPU follows amp_bf16 alone
    assert use_bf16_autocast(TrainConfig(amp_bf16=True, amp_bf16_cpu=False), gpu) is True


def test_checkpoints_keep_the_newest_and_verify_their_bytes(tmp_path) -> None:
    store = LocalStore(tmp_path)
    for epoch in (1, 2, 3):
        save_checkpoint(store, epoch, {"epoch": epoch, "w": torch.full((3,), epoch)}, keep=2)
    assert checkpoint_epochs(store) == [3, 2]
    assert not (tmp_path / checkpoint_key(1)).exists()
    assert torch.equal(load_checkpoint(store, 3)["w"], torch.full((3,), 3))
    (tmp_path / checkpoint_key(3)).write_bytes(b"torn")
    messages: list[str] = []
    epoch, state = newest_checkpoint(store, messages.append)
    assert (epoch, state["epoch"]) == (2, 2)
    (message,) = messages
    assert "epoch-0003.pt is unusable (sha256 differs" in message
    sidecar = json.loads((tmp_path / checkpoint_key(2, "json")).read_text())
    assert sidecar["bytes"] == (tmp_path / checkpoint_key(2)).stat().st_size


def test_no_intact_checkpoint_means_a_fresh_start(tmp_path) -> None:
    store = LocalStore(tmp_path)
    save_checkpoint(store, 1, {"epoch": 1}, keep=2)
    (tmp_path / checkpoint_key(1)).write_bytes(b"")
    messages: list[str] = []
    assert newest_checkpoint(store, messages.append) is None
    assert len(messages) == 1
