"""Build, push and check the step images.

    python containers/images.py check                       # tags in configs/ == package version
    python containers/images.py build --registry ghcr.io/me [--push] [--only data,train]

Each step image is tagged with the package version (never ``latest``) and labelled with
the git revision. ``build`` prints each docker command before it runs it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from steps.common.version import git_revision, package_version  # noqa: E402

IMAGES = {
    "data": "data.Dockerfile",
    "train": "train.Dockerfile",
    "optimize": "optimize.Dockerfile",
    "serve": "serve.Dockerfile",
}


def config_tags() -> dict[str, str]:
    """``images.tag`` of every config file in configs/ (the top-level ones)."""
    import yaml

    tags = {}
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        tags[str(path.relative_to(ROOT))] = str(data.get("images", {}).get("tag", "<default>"))
    return tags


def check() -> list[str]:
    version = package_version(ROOT)
    return [
        f"{path}: images.tag {tag!r} is not the package version {version!r}"
        for path, tag in config_tags().items()
        if tag not in (version, "<default>")
    ]


def build_commands(registry: str, names: list[str], push: bool) -> list[list[str]]:
    version, revision = package_version(ROOT), git_revision(ROOT) or "unknown"
    commands = []
    for name in names:
        image = f"{registry.rstrip('/')}/cifar-{name}:{version}"
        commands.append(
            ["docker", "build", "-f", f"containers/{IMAGES[name]}",
             "--build-arg", f"VERSION={version}", "--build-arg", f"REVISION={revision}",
             "-t", image, "."]
        )  # fmt: skip
        if push:
            commands.append(["docker", "push", image])
    return commands


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="containers/images.py", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="image tags in configs/ equal the package version")
    build = sub.add_parser("build", help="docker build (and push) every step image")
    build.add_argument("--registry", required=True, help="e.g. ghcr.io/my-org")
    build.add_argument("--push", action="store_true")
    build.add_argument("--only", default=",".join(IMAGES), help="comma-separated subset")
    args = parser.parse_args(argv)
    problems = check()
    for problem in problems:
        print(f"images: error: {problem}", file=sys.stderr)
    if problems or args.command == "check":
        if not problems:
            print(f"all image tags are {package_version(ROOT)}")
        return 1 if problems else 0
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(IMAGES))
    if unknown:
        print(
            f"images: error: unknown image {unknown}; choose from {sorted(IMAGES)}", file=sys.stderr
        )
        return 2
    for command in build_commands(args.registry, names, args.push):
        print("+", " ".join(command), flush=True)
        subprocess.run(command, cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
