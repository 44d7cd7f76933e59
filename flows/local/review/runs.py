"""The local runs under a runs directory (``runs/`` by default, as ``python flows/cifar.py``
writes them): each a directory with a ``state.json``. A run is named by its workflow name
or its directory; a name that matches none is refused in one line naming the nearest."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

RUNS_DIR = Path("runs")
STATE = "state.json"


class ReviewError(ValueError):
    """What the user named is not there, or options that do not go together: one line,
    exit 2."""


class RunNotFound(ReviewError):
    """No run by that name or directory, no task of that name in it."""


def run_dirs(runs_dir: Path) -> list[Path]:
    """Every run directory under ``runs_dir``, by name."""
    if not runs_dir.is_dir():
        return []
    return sorted(p for p in runs_dir.iterdir() if (p / STATE).is_file())


def find_run(run: str, runs_dir: Path = RUNS_DIR) -> Path:
    """The directory of ``run``: a run directory given as a path, else the run of that
    name under ``runs_dir``."""
    given = Path(run)
    if (given / STATE).is_file():
        return given
    if given.name and (runs_dir / given.name / STATE).is_file() and given.parent == Path("."):
        return runs_dir / given.name
    names = [p.name for p in run_dirs(runs_dir)]
    if given.is_dir():
        raise RunNotFound(f"{run}: not a local run (no {STATE} there)")
    if not names:
        raise RunNotFound(
            f"no run {run!r}: {runs_dir}/ holds no run yet (python flows/cifar.py starts one)"
        )
    nearest = ", ".join(difflib.get_close_matches(given.name, names, n=3, cutoff=0.0))
    raise RunNotFound(f"no run {run!r} in {runs_dir}/; the nearest: {nearest}")


def load_state(run_dir: Path) -> dict[str, Any]:
    """A run's state.json (written whole by the runner: a new file moved over the old)."""
    path = run_dir / STATE
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise RunNotFound(f"{path}: cannot read it ({exc.strerror})") from None
    except ValueError as exc:
        raise RunNotFound(f"{path}: not a run's state ({exc})") from None
