"""Which code this is: the project's version (the tag every step image carries) and the
git revision a deployment records, read from the checkout when there is one.

Standard library only: ``containers/images.py`` imports it where nothing is installed.
"""

from __future__ import annotations

import os
import re
import subprocess
from importlib import metadata
from pathlib import Path

# The checkout's root, when this code runs from one (else wherever the package is installed).
REPO_ROOT = Path(__file__).resolve().parents[2]
PROJECT = "cifar-pipeline"


def package_version(root: Path | None = None) -> str:
    """The project's version: ``pyproject.toml``'s in a checkout (``root``, default the one
    this code runs from), else the installed package's."""
    pyproject = (root or REPO_ROOT) / "pyproject.toml"
    if pyproject.is_file():
        text = pyproject.read_text()
        name = re.search(r'^name = "([^"]+)"', text, re.MULTILINE)
        version = re.search(r'^version = "([^"]+)"', text, re.MULTILINE)
        if version and (root or (name and name.group(1) == PROJECT)):
            return version.group(1)
    try:
        return metadata.version(PROJECT)
    except metadata.PackageNotFoundError:  # neither a checkout nor installed
        return "0.0.0+unknown"


def git_revision(root: Path | None = None) -> str | None:
    """The commit being deployed, when known: CI's variables, else the checkout's HEAD."""
    for name in ("GIT_COMMIT", "GITHUB_SHA"):
        if os.environ.get(name):
            return os.environ[name]
    root = root or REPO_ROOT
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    revision = done.stdout.strip() if done.returncode == 0 else ""
    return revision or None
