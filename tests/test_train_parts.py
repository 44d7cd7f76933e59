"""The trainer's parts on their own: networks, the tensor data path, the schedule, the
epoch totals, checkpoints and resume, the test hooks (no torchrun, no servers)."""

from __future__ import annotations

import ast
import contextlib
import itertools
import json
import re

import numpy as np
import pytest
import torch

from steps.common.config import ConfigError, TrainConfig
from steps.common.device import cpu_bf16_features
from steps.common.models import ARCHITECTURES, build_model, count_parameters
from steps.common.storage import LocalStore
from steps.train.checkpoints import (
    CheckpointMismatch,
    Progress,
    checkpoint_epochs,
    checkpoint_key,
    load_checkpoint,
    newest_checkpoint,
    resume,
    save_checkpoint,
    training_state,
)
from steps.train.data import Batches, crop_flip, epoch_order
from steps.train.distributed import Dist
from steps.train.fit import Hooks, StopRequested
from steps.train.loop import EpochTotals, epoch_metrics, evaluate, one_cycle, use_bf16_autocast
from steps.train.step import build_parser, load_hooks
from tests.helpers.paths import REPO_ROOT
from tests.helpers.train_hooks import HOOKS, TestHooks, state_checksum

ONE_PROCESS = Dist(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


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


def test_epoch_totals_cross_the_all_reduce_as_one_tensor_and_come_back_by_name() -> None:
    f64 = {"dtype": torch.float64}
    totals = EpochTotals(
        train=torch.tensor([6.0, 3.0, 4.0], **f64),
        test=torch.tensor([2.0, 1.0, 2.0], **f64),
        confusion=torch.tensor([[1.0, 0.0], [1.0, 0.0]], **f64),
    )
    flat = totals.to_tensor()
    assert flat.shape == (3 + 3 + 2 * 2,)
    summed = EpochTotals.from_tensor(flat * 2, num_classes=2)  # two ranks with equal sums
    assert torch.equal(summed.train, totals.train * 2)
    assert torch.equal(summed.test, totals.test * 2)
    assert torch.equal(summed.confusion, totals.confusion * 2)
    assert summed.test_accuracy == 0.5
    assert epoch_metrics(summed, lr=0.1, seconds=2.0, images=8) == {
        "train_loss": 1.5,
        "train_accuracy": 0.75,
        "test_loss": 1.0,
        "test_accuracy": 0.5,
        "lr": 0.1,
        "images_per_s": 4.0,
        "epoch_seconds": 2.0,
    }
    alone = totals.all_reduced(ONE_PROCESS)  # one process: the sums as they are
    assert torch.equal(alone.to_tensor(), flat)


class AlwaysClass(torch.nn.Module):
    """Logits that pick ``label`` for every image."""

    def __init__(self, label: int, num_classes: int) -> None:
        super().__init__()
        self.logits = torch.nn.functional.one_hot(torch.tensor(label), num_classes).float()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(len(images), -1)


def test_evaluate_sums_agree_with_its_confusion_matrix() -> None:
    labels = torch.tensor([0, 0, 1, 2, 2, 2])
    batches = Batches(torch.zeros(6, 32, 32, 3, dtype=torch.uint8), labels, global_batch=6)
    sums, confusion = evaluate(AlwaysClass(2, 3), batches, 3, contextlib.nullcontext)
    assert confusion.tolist() == [[0, 0, 2], [0, 0, 1], [0, 0, 3]]  # true class by row
    assert sums[1:].tolist() == [3.0, 6.0]  # correct, images
    assert sums.dtype == confusion.dtype == torch.float64


def small_training() -> dict:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, one_cycle(10, 2))
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return {"model": model, "optimizer": optimizer, "scheduler": scheduler}


def test_resume_restores_modules_rng_and_progress_of_the_checkpoint(tmp_path) -> None:
    store, identity = LocalStore(tmp_path), {"architecture": "linear", "dataset_digest": "d"}
    saved = small_training()
    progress = Progress(epoch=2, train_seconds=1.5, history=[{"epoch": 1.0}, {"epoch": 2.0}])
    save_checkpoint(store, 2, training_state(2, identity, saved, progress), keep=2)
    expected_draw = torch.rand(3)  # what the RNG gives right after the checkpoint

    restored = {"model": torch.nn.Linear(4, 2)}
    restored["optimizer"] = torch.optim.SGD(restored["model"].parameters(), lr=0.1, momentum=0.9)
    restored["scheduler"] = torch.optim.lr_scheduler.LambdaLR(
        restored["optimizer"], one_cycle(10, 2)
    )
    assert resume(store, ONE_PROCESS, identity, restored, print) == progress
    assert torch.equal(torch.rand(3), expected_draw)
    assert state_checksum(restored["model"]) == state_checksum(saved["model"])
    momentum = [
        restored["optimizer"].state[p]["momentum_buffer"] for p in restored["model"].parameters()
    ]
    expected = [saved["optimizer"].state[p]["momentum_buffer"] for p in saved["model"].parameters()]
    assert all(map(torch.equal, momentum, expected))
    assert restored["scheduler"].last_epoch == saved["scheduler"].last_epoch == 1
    with pytest.raises(CheckpointMismatch, match=r"was trained with .*'linear'.*, not"):
        resume(store, ONE_PROCESS, {**identity, "dataset_digest": "e"}, restored, print)
    assert resume(LocalStore(tmp_path / "empty"), ONE_PROCESS, identity, restored, print) is None


@pytest.mark.parametrize(
    ("stop_after", "epoch", "last", "stops"),
    [
        pytest.param(None, 1, False, False, id="not-asked"),
        pytest.param("2", 1, False, False, id="before-k"),
        pytest.param("2", 2, False, True, id="at-k"),
        pytest.param("2", 2, True, False, id="at-k-but-the-last-epoch"),
    ],
)
def test_stop_hook_fires_after_epoch_k_unless_no_epoch_follows(
    stop_after, epoch, last, stops
) -> None:
    argv = ["--dataset", "d", "--output", "o"]
    if stop_after:  # as the command line hands it over: a string
        argv += ["--hooks", HOOKS, "--hook-arg", f"stop_after={stop_after}"]
    args = build_parser().parse_args(argv)
    hooks = load_hooks(args.hooks, args.hook_args)
    assert isinstance(hooks, TestHooks if stop_after else Hooks)
    if stops:
        with pytest.raises(StopRequested, match=f"stopped after epoch {epoch} "):
            hooks.after_epoch(epoch, last, ONE_PROCESS)
    else:
        hooks.after_epoch(epoch, last, ONE_PROCESS)


def test_debug_hook_writes_each_ranks_weights_checksum(tmp_path) -> None:
    model = torch.nn.Linear(4, 2)
    rank_1 = Dist(rank=1, world_size=2, local_rank=1, device=torch.device("cpu"))
    load_hooks(HOOKS, [f"debug_dir={tmp_path}"]).at_end(model, 3, rank_1)
    written = json.loads((tmp_path / "rank-1.json").read_text())
    assert written == {"rank": 1, "weights_sha256": state_checksum(model), "start_epoch": 3}


@pytest.mark.parametrize(
    ("spec", "pairs", "words"),
    [
        (None, ["stop_after=1"], "--hook-arg stop_after=1 without --hooks"),
        (HOOKS, ["stop_after"], "--hook-arg stop_after: expected KEY=VALUE"),
        ("tests.no_such_module:Hooks", [], "--hooks tests.no_such_module:Hooks: No module named"),
        (
            "tests.helpers.train_hooks:Nothing",
            [],
            "--hooks tests.helpers.train_hooks:Nothing: module ",
        ),
        (HOOKS, ["colour=red"], "unexpected keyword argument 'colour'"),
        (
            "tests.helpers.train_hooks:state_checksum",
            [],
            "--hooks tests.helpers.train_hooks:state_checksum: ",
        ),
        ("tests.helpers.train_hooks:hook_args", [], "made a list, not Hooks"),
    ],
    ids=["arg-without-hooks", "arg-without-value", "no-module", "no-name", "bad-arg",
         "not-a-factory", "not-hooks"],
)  # fmt: skip
def test_hooks_that_cannot_be_made_are_a_user_error_naming_them(spec, pairs, words) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_hooks(spec, pairs)


TORCHRUN_VARIABLES = {"RANK", "WORLD_SIZE", "LOCAL_RANK"}


def environment_reads(path) -> set[str]:
    """The names a module reads from the environment: ``os.environ.get("X")``,
    ``os.environ["X"]``, ``os.getenv("X")``, and any other string given to them."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        target = None
        if isinstance(node, ast.Call) and ast.unparse(node.func) in (
            "os.environ.get", "os.getenv", "environ.get", "getenv",
        ):  # fmt: skip
            target = node.args[0] if node.args else None
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in (
            "os.environ",
            "environ",
        ):
            target = node.slice
        if target is not None:
            names.add(ast.unparse(target).strip("'\""))
    return names


def test_the_trainer_reads_only_torchruns_variables_from_the_environment(tmp_path) -> None:
    """Issue 40: the test-only stop is injected by the tests (--hooks), not read from the
    environment by production code. steps/train reads what torchrun sets, nothing else."""
    train = REPO_ROOT / "steps" / "train"
    read = {path.name: environment_reads(path) for path in sorted(train.glob("*.py"))}
    assert set().union(*read.values()) == TORCHRUN_VARIABLES, read
    # The reader sees a read as the trainer made one before (hooks.py, by a constant's name).
    before = tmp_path / "hooks.py"
    before.write_text(
        'import os\nSTOP_AFTER_ENV = "CIFAR_TRAIN_STOP_AFTER_EPOCH"\n'
        "stop_after = int(os.environ.get(STOP_AFTER_ENV) or 0)\n"
        'debug = os.environ["CIFAR_TRAIN_DEBUG_DIR"]\n'
    )
    assert environment_reads(before) == {"STOP_AFTER_ENV", "CIFAR_TRAIN_DEBUG_DIR"}
