"""Stage CIFAR-10 into the artifact store, content-addressed, manifest last.

    python -m steps.stage_data [--config FILE] [--set section.field=value ...]
                               [--source {cifar10 | synthetic[:N] | PATH-or-URI}]
                               [--dest ROOT_URI] [--md5 HEX|none] [--outputs-dir DIR] [--debug]

What to stage and where come from the config (``data.source``, ``storage.root_uri``,
``data.md5``), as every step's settings do; the workflow passes nothing else.
``--source``, ``--dest`` and ``--md5`` are shorthands for a person running the step alone.

parse args -> resolve the source -> stage it (``steps.stage_data.stage``) -> output
parameters ``dataset_uri``, ``digest``, ``num_train``, ``num_test`` and ``summary.json``;
the dataset URI on stdout. Staging the same content again finds the manifest and does
nothing. This step never imports torch: the data image stays small.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from rich.console import Console

from steps.common.config import load_config
from steps.common.progress import human_mb
from steps.common.step_cli import add_common, run_main, startup_seconds, write_outputs
from steps.stage_data.cifar import SourceUnreachable
from steps.stage_data.stage import StageResult, parse_source, stage_dataset


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.stage_data", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--source", help="cifar10 | synthetic[:N] | PATH-or-URI (default: data.source)"
    )
    parser.add_argument(
        "--dest", help="artifact root: path, file:// or s3:// (default: storage.root_uri)"
    )
    parser.add_argument("--md5", help="expected tarball md5, or 'none' (default: data.md5)")
    add_common(parser, mlflow_run=False)
    return parser


def run(args: argparse.Namespace, console: Console | None = None) -> StageResult:
    console = console or Console(stderr=True, soft_wrap=True)
    overrides = list(args.overrides) + ([f"data.md5={args.md5}"] if args.md5 else [])
    cfg = load_config(args.config, overrides)
    source = parse_source(args.source or cfg.data.source)
    result = stage_dataset(source, args.dest or cfg.storage.root_uri, cfg, console)
    if args.outputs_dir:
        result.startup_seconds = startup_seconds(result.seconds)
        outputs = {"dataset_uri": result.dataset_uri, "digest": result.digest}
        outputs |= {"num_train": result.num_train, "num_test": result.num_test}
        write_outputs(args.outputs_dir, {**outputs, "summary.json": asdict(result)})
    if not result.already_staged:
        console.print(
            f"Staged {result.num_train:,} train + {result.num_test:,} test images "
            f"({human_mb(result.uploaded_bytes)}, upload "
            f"{result.uploaded_bytes / 2**20 / max(result.upload_seconds, 1e-9):,.1f} MB/s, "
            f"step {result.seconds:.2f} s)"
        )
    print(result.dataset_uri)
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main("stage_data", run, args, user_errors=(SourceUnreachable,))
