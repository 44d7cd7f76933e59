"""Classify pictures with the trained model: the seed articles' closing promise.

    python -m steps.predict IMAGE [IMAGE ...] --model MODEL_URI [--optimized OPT_URI]
        [--variant NAME] [--top-k K] [--config F] [--set k=v ...] [--debug]

Any image Pillow reads (JPEG, PNG, ...) of any size: turned upright by its EXIF
orientation, converted to RGB, centre-cropped to a square (CIFAR images are square and
centred), resized to 32 x 32 with Pillow's antialiased bilinear filter (a 32 x 32 picture is
left as it is), then normalised exactly as in training (``steps.common.trained_model.normalize``).
Prints ``IMAGE: class probability`` per image (the top K with ``--top-k``). With
``--optimized`` the variant is chosen by one rule: with ``--report`` each batch runs on the
variant the benchmark measured fastest at that batch size; without it, the first that runs
here of ``steps.common.optimized_variants.PREFERENCE`` (the measured order: TensorRT, ORT's GPU
providers, OpenVINO and ONNX Runtime INT8, AOTInductor BF16, OpenVINO, ONNX Runtime,
AOTInductor, TorchScript, export), or ``--variant``; eager when none runs. A file that is
not an image is a one-line error for that file; the others are still classified, and the
exit code is then 2.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

from steps.common.config import load_config
from steps.common.contracts.benchmark import BenchmarkReport
from steps.common.contracts.variants import BatchRange
from steps.common.device import pick_device
from steps.common.optimized_variants import PREFERENCE, load_variants, open_optimized, variant_order
from steps.common.step_cli import add_common, exit_process, run_main
from steps.common.trained_model import (
    DTYPES,
    InputError,
    Runner,
    load_trained,
    normalize,
    run_batched,
)

SIDE = 32


class ImageError(ValueError):
    """One input file is not a readable image."""


@dataclass
class Prediction:
    path: str
    top: list[tuple[str, float]] = field(default_factory=list)
    error: str | None = None


@dataclass
class PredictResult:
    variant: str
    predictions: list[Prediction]

    @property
    def exit_code(self) -> int:
        return 2 if any(p.error for p in self.predictions) else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.predict", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="JPEG/PNG files")
    parser.add_argument("--model", required=True, help="MODEL_URI written by steps.train")
    parser.add_argument("--optimized", help="OPT_URI written by steps.optimize")
    parser.add_argument(
        "--variant",
        help=f"use this variant (default: the first that runs of {', '.join(PREFERENCE)})",
    )
    parser.add_argument(
        "--report",
        help="REPORT_URI written by steps.benchmark: run each batch on the variant it measured "
        "fastest at that batch size (needs --optimized)",
    )
    parser.add_argument("--top-k", type=int, default=1, help="classes to print per image")
    add_common(parser, outputs=False)
    return parser


def run(args: argparse.Namespace) -> PredictResult:
    if args.top_k < 1:
        raise InputError(f"--top-k {args.top_k}: must be 1 or more")
    cfg = load_config(args.config, args.overrides)
    device = pick_device()
    trained = load_trained(args.model, cfg.storage, device)
    if args.top_k > len(trained.classes):
        raise InputError(
            f"--top-k {args.top_k}: the model has {len(trained.classes)} classes; "
            f"use 1 to {len(trained.classes)}"
        )
    predictions, pixels = [], []
    for image in args.images:
        try:
            pixels.append(load_image(Path(image)))
            predictions.append(Prediction(image))
        except ImageError as exc:
            predictions.append(Prediction(image, error=str(exc)))
    with tempfile.TemporaryDirectory(prefix="predict-") as tmp:
        name, runner, precision, batch_range = choose_variant(args, cfg, trained, device, Path(tmp))
        if pixels:
            x = normalize(torch.stack(pixels).to(device), trained.mean, trained.std)
            logits = run_batched(runner, x.to(DTYPES[precision]), batch_range.max, batch_range.min)
            probs = torch.softmax(logits.float(), dim=1).cpu()
    k = args.top_k
    ok = iter(range(len(pixels)))
    for prediction in predictions:
        if prediction.error:
            print(f"predict: error: {prediction.error}", file=sys.stderr)
            continue
        values, indices = probs[next(ok)].topk(k)
        pairs = zip(values.tolist(), indices.tolist(), strict=True)
        prediction.top = [(trained.classes[i], v) for v, i in pairs]
        text = ", ".join(f"{label} {p:.1%}" for label, p in prediction.top)
        print(f"{prediction.path}: {text}")
    print(f"predict: {len(pixels)} classified with {name} ({precision})", file=sys.stderr)
    return PredictResult(name, predictions)


def load_image(path: Path) -> torch.Tensor:
    """uint8 ``3 x 32 x 32``: upright, RGB, centre square, antialiased bilinear resize."""
    try:
        with Image.open(path) as img:
            img = ImageOps.exif_transpose(img).convert("RGB")
            width, height = img.size
            side = min(width, height)
            left, top = (width - side) // 2, (height - side) // 2
            if (width, height) != (SIDE, SIDE):
                box = (left, top, left + side, top + side)
                img = img.resize((SIDE, SIDE), Image.Resampling.BILINEAR, box=box)
            pixels = np.asarray(img, dtype=np.uint8)
    except UnidentifiedImageError:
        raise ImageError(f"{path}: not an image Pillow can read (JPEG, PNG, ...)") from None
    except Image.DecompressionBombError as exc:
        size = re.search(r"\((\d+) pixels\)", str(exc))
        pixels = f"{int(size.group(1)):,} pixels" if size else "too many pixels"
        raise ImageError(
            f"{path}: {pixels}, over Pillow's limit of {2 * Image.MAX_IMAGE_PIXELS:,}; "
            "refused as a possible decompression bomb (shrink it first)"
        ) from None
    except OSError as exc:  # missing, unreadable or truncated
        raise ImageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return torch.from_numpy(pixels.copy()).permute(2, 0, 1).contiguous()


EAGER_RANGE = BatchRange(min=1, opt=64, max=256)  # eager runs any batch; chunks of 256


def choose_variant(
    args, cfg, trained, device, workdir: Path
) -> tuple[str, Runner, str, BatchRange]:
    """(name, runner, precision, batch range) of the best variant that loads here."""
    eager = ("eager", trained.model, "fp32", EAGER_RANGE)
    if not args.optimized:
        if args.variant and args.variant != "eager":
            raise InputError(f"--variant {args.variant} needs --optimized OPT_URI")
        return eager
    manifest = open_optimized(args.optimized, trained, cfg.storage)
    if getattr(args, "report", None) and not args.variant:
        return dispatched(args, cfg, manifest, trained, device, workdir)
    if args.variant and args.variant != "eager" and args.variant not in manifest.variants:
        raise InputError(
            f"--variant {args.variant}: not in {args.optimized}; has {', '.join(manifest.variants)}"
        )
    order = [args.variant] if args.variant else variant_order(manifest.variants)
    if order == ["eager"]:
        return eager
    for variant in load_variants(args.optimized, manifest, cfg.storage, device, workdir, order):
        if variant.runner is not None:
            precision = variant.entry.precision
            return variant.name, variant.runner, precision, manifest.batch_range
        if variant.status == "unavailable":
            print(
                f"predict: {variant.name} unavailable ({variant.reason}); trying the next",
                file=sys.stderr,
            )
    print("predict: no optimized variant runs here; using eager", file=sys.stderr)
    return eager


def dispatched(
    args, cfg, manifest, trained, device, workdir: Path
) -> tuple[str, Runner, str, BatchRange]:
    """A dispatcher over the variants ``benchmark.json`` measured fastest per batch size."""
    from steps.common.serving.runners import Dispatcher
    from steps.common.storage import open_store
    from steps.common.trained_model import read_json

    store = open_store(args.report, cfg.storage)
    document = read_json(store, BenchmarkReport.DOCUMENT, "pass the REPORT_URI of steps.benchmark")
    report = BenchmarkReport.parse(document, store.uri(BenchmarkReport.DOCUMENT))
    fastest = dict(report.fastest_by_batch)
    names = sorted(set(fastest.values()) - {"eager"})
    runners: dict[str, Runner] = {"eager": trained.model}
    for variant in load_variants(args.optimized, manifest, cfg.storage, device, workdir, names):
        if variant.runner is None:
            raise InputError(f"--report: {variant.name} cannot run here ({variant.reason})")
        dtype = DTYPES[variant.entry.precision]
        runners[variant.name] = lambda x, r=variant.runner, d=dtype: r(x.to(d)).float()
    try:
        dispatcher = Dispatcher(runners, fastest)
    except ValueError as exc:
        raise InputError(f"--report {args.report}: {exc}") from None
    table = ", ".join(f"bs {b}: {n}" for b, n in sorted(fastest.items()))
    return f"dispatch ({table})", dispatcher, "fp32", manifest.batch_range


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main("predict", run, args, user_errors=(InputError,))


if __name__ == "__main__":
    exit_process(main())
