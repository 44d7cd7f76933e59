"""steps.step_cli, against real processes: the start-up every step reports beside its work
(read from /proc), and the exit every step's ``__main__`` takes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO_ROOT

needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")

REPORT = "from steps.common.step_cli import seconds_since_launch as s; print(s())"


def _launch(command: list[str], **env: str) -> float:
    done = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip())


@needs_proc
def test_counts_from_this_process_start() -> None:
    waited = _launch([sys.executable, "-c", f"import time; time.sleep(0.6); {REPORT}"])
    assert 0.6 <= waited < 10


@needs_proc
def test_a_torchrun_rank_counts_from_its_launcher() -> None:
    # The rank (python) starts 2 s after its parent (sh; the trailing `true` keeps sh from
    # exec-ing python in its place): under torchrun it reports the launcher's age.
    script = f'sleep 2; "{sys.executable}" -c "{REPORT}"; true'
    as_rank = _launch(["sh", "-c", script], TORCHELASTIC_RUN_ID="test")
    alone = _launch(["sh", "-c", script], TORCHELASTIC_RUN_ID="")
    assert as_rank >= 2.0 > alone


def test_exit_process_keeps_the_code_and_runs_atexit_handlers(tmp_path) -> None:
    script = (
        "import atexit; from pathlib import Path; "
        f"atexit.register(lambda: Path({str(tmp_path / 'ran')!r}).write_text('yes')); "
        "from steps.common.step_cli import exit_process; exit_process(3)"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, check=False)
    assert done.returncode == 3
    assert (tmp_path / "ran").read_text() == "yes"
