"""``python -m steps.config``: validate and print a config, or describe every field.

python -m steps.config [--config FILE] [--set section.field=value ...]
python -m steps.config --describe
"""

from __future__ import annotations

import argparse
import sys

import yaml
from rich.console import Console
from rich.table import Table

from steps.common.config import ConfigError, describe, dump_config, load_config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m steps.config", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--config", help="config YAML (default: configs/local.yaml)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE"
    )
    parser.add_argument("--describe", action="store_true", help="list every field")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(soft_wrap=True)
    if args.describe:
        table = Table("field", "type", "default", "description")
        for row in describe():
            table.add_row(*row)
        console.print(table)
        return 0
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"config: error: {exc}", file=sys.stderr)
        return 2
    print(yaml.safe_dump(dump_config(cfg), sort_keys=False), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
