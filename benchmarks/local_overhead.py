"""What the local runner costs: a smoke pipeline's wall time against the steps' own time,
and the runner's own per-task cost on no-op tasks.

    python benchmarks/local_overhead.py [--config configs/smoke.yaml] [--noop-tasks 20]
                                        [--run-dir runs/NAME] [--quick]

1. Runs ``python flows/cifar.py --config configs/smoke.yaml`` in a scratch directory (a
   fresh memo cache, so staging runs) and reads its ``state.json``. Per task, from the
   outside in: the time the runner saw (its bookkeeping, spawn, outputs read), the task's
   process from spawn to exit, and what the step reports in ``summary.json``: its own
   work (``seconds``) after its start-up (``startup_seconds``: interpreter and imports;
   for train, torchrun's launch, the ranks' start and the rendezvous). Process minus
   start-up and work is the step's teardown (interpreter exit, torchrun's shutdown). All
   of that happens inside the step's process and a pod pays it too; what the local runner
   adds is wall time outside the processes on the critical path: the CLI's start, the
   runner's work around each task, the summary. Printed against each inner measure.
2. Runs a chain of ``true`` container tasks through the same runner: wall / tasks is the
   runner's own cost per task, with nothing else in it. First, a fan-out of ``--fanout``
   (200) no-op tasks side by side and a ``--chain`` (50) deep chain: per task, the wall
   time and the runner's own CPU time (its threads, not the tasks' processes); target
   < 10 ms per task. ``--noop-only`` prints just these.

``--run-dir runs/<name>`` reads an earlier local run instead of running the smoke pipeline
(its wall time is then the runner's, first task start to last end); tasks that never
started (Skipped, Omitted) are named, not timed. ``--quick`` takes 5 no-op tasks a shape:
with ``--run-dir``, a dry run of every code path in seconds (the test suite's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hera.workflows import DAG, Container, Workflow
from rich.console import Console
from rich.table import Table

from flows.local.workflow import LocalRunner

REPO_ROOT = Path(__file__).resolve().parent.parent


def step_seconds(task_dir: Path) -> tuple[float, float] | None:
    """(work, start-up) seconds from the step's summary.json; None if it reports none."""
    for summary in sorted(task_dir.glob("outputs/**/summary.json")):
        data = json.loads(summary.read_text())
        if "seconds" in data:
            return float(data["seconds"]), float(data.get("startup_seconds") or 0.0)
    return None


def pipeline_run(config: str, scratch: Path) -> tuple[float, dict, Path]:
    env = {**os.environ, "CIFAR_CACHE_DIR": str(scratch / "cache")}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "flows" / "cifar.py"), "--config", config],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"the pipeline failed:\n{done.stderr[-4000:]}")
    run_dir = next((scratch / "runs").iterdir())
    return wall, json.loads((run_dir / "state.json").read_text()), run_dir


def noop_workflow(tasks: int, chained: bool) -> dict:
    with Workflow(generate_name="noop-", entrypoint="main") as workflow:
        step = Container(name="noop", image="busybox:1.36", command=["true"])
        with DAG(name="main"):
            previous = None
            for i in range(tasks):
                task = step(name=f"t{i}")
                if chained and previous is not None:
                    previous >> task
                previous = task
    return workflow.to_dict()


def noop_run(tasks: int, chained: bool, scratch: Path) -> tuple[float, float, float]:
    """Wall seconds, the runner's own CPU seconds (all its threads, not its children) and
    the tasks' process seconds, for ``tasks`` no-op tasks in a chain or side by side."""
    manifest = noop_workflow(tasks, chained)
    runs = scratch / f"noop-{'chain' if chained else 'fanout'}-{tasks}"
    runner = LocalRunner(manifest, runs, cache_dir=scratch / "memo")
    start, cpu = time.perf_counter(), time.process_time()
    result = runner.run()
    wall, own_cpu = time.perf_counter() - start, time.process_time() - cpu
    assert result.status == "Succeeded"
    return wall, own_cpu, sum(t.process_seconds for t in result.tasks.values())


def noop_chain(tasks: int, scratch: Path) -> float:
    return noop_run(tasks, True, scratch)[0]


def print_noop(console: Console, scratch: Path, fanout: int, chain: int) -> None:
    for label, tasks, chained in (("fan-out", fanout, False), ("chain", chain, True)):
        wall, own_cpu, process = noop_run(tasks, chained, scratch)
        console.print(
            f"{label} of {tasks} no-op tasks: wall {wall:.2f} s = {wall / tasks * 1000:.1f} ms "
            f"per task; the runner's own CPU {own_cpu / tasks * 1000:.1f} ms per task"
            + (f"; wall minus the tasks' processes {(wall - process) / tasks * 1000:.1f} ms "
               "per task" if chained else "")
        )  # fmt: skip


NEVER_RAN = ("Skipped", "Omitted")  # no process: a when that was false, a depends not met
# The pipeline's chain after its two first tasks (create-run and stage, side by side); the
# exit handler is a DAG (no process of its own): its close-run is on the path.
CHAIN = ("train", "optimize", "benchmark", "deploy", "serve-check", "onExit.close-run")


def state_of(run_dir: Path) -> tuple[float, dict]:
    """An earlier run's state.json; its wall time as the runner saw it (first start to last
    end: the CLI's own start is not in it)."""
    state = json.loads((run_dir / "state.json").read_text())
    records = [
        *state["tasks"].values(),
        *([state["exit_handler"]] * bool(state.get("exit_handler"))),
    ]
    started = [r["started"] for r in records if r.get("started")]
    finished = [r["finished"] for r in records if r.get("finished")]
    return max(finished) - min(started), state


def print_overhead(console: Console, title: str, wall: float, state: dict, run_dir: Path) -> None:
    """Per task, the runner's view against the step's own report; the critical path."""
    table = Table(title=f"{title}: wall {wall:.1f} s")
    columns = ("task", "runner-seen", "process", "start-up", "work", "teardown", "runner")
    for column in columns:
        table.add_column(column, justify="left" if column == "task" else "right")
    records = dict(state["tasks"])
    if state.get("exit_handler"):
        records["onExit"] = state["exit_handler"]
    spans: dict[str, tuple[float, float, float, float]] = {}  # seen, process, start-up, work
    never = []
    for name, record in records.items():
        if record["state"] in NEVER_RAN or record.get("started") is None:
            never.append(name)
            continue
        seen, process = record["finished"] - record["started"], record["process_seconds"]
        work, startup = step_seconds(run_dir / "tasks" / name) or (0.0, 0.0)
        spans[name] = (seen, process, startup, work)
        teardown = process - startup - work
        cells = [seen, process, startup, work, teardown, seen - process]
        table.add_row(name, *(f"{c:.2f}" for c in cells))
    console.print(table)
    if never:
        console.print(f"never started (Skipped or Omitted): {', '.join(never)}")
    # create-run and stage run side by side: the critical path takes the longer one.
    firsts = sorted((n for n in ("create-run", "stage") if n in spans), key=lambda n: spans[n][0])
    path = [*firsts[-1:], *(n for n in CHAIN if n in spans)]
    seen, process, startup, work = (sum(spans[n][i] for n in path) for i in range(4))
    console.print(f"critical path: {' -> '.join(path)}; seconds on it:")
    for label, inner in (
        ("the steps' processes (spawn to exit)", process),
        ("the steps' reported start-up + work", startup + work),
        ("the steps' reported work alone", work),
    ):
        console.print(
            f"  wall {wall:.1f} - {label} {inner:.1f} = {wall - inner:.1f} s "
            f"({(wall - inner) / wall:.1%} of wall)"
        )
    console.print(
        f"local runner's overhead (first line; target <= 10% of wall): around the tasks "
        f"{seen - process:.1f} s, the CLI's start, scheduling and summary "
        f"{wall - seen:.1f} s"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO_ROOT / "configs" / "smoke.yaml"))
    parser.add_argument("--noop-tasks", type=int, default=20)
    parser.add_argument("--fanout", type=int, default=200, help="no-op tasks side by side")
    parser.add_argument("--chain", type=int, default=50, help="no-op tasks one after another")
    parser.add_argument("--noop-only", action="store_true", help="skip the smoke pipeline")
    parser.add_argument(
        "--run-dir", type=Path, help="read an earlier run's runs/<name> instead of running one"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a dry run: 5 no-op tasks a shape (with --run-dir)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.fanout = args.chain = args.noop_tasks = 5
    console = Console(soft_wrap=True)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        print_noop(console, scratch, args.fanout, args.chain)
        if args.noop_only:
            return
        if args.run_dir:
            wall, state = state_of(args.run_dir)
            print_overhead(console, f"run {args.run_dir.name}", wall, state, args.run_dir)
        else:
            wall, state, run_dir = pipeline_run(args.config, scratch)
            title = f"smoke pipeline, {Path(args.config).name}"
            print_overhead(console, title, wall, state, run_dir)
        noop = noop_chain(args.noop_tasks, scratch)
        console.print(
            f"runner's own cost: {args.noop_tasks} chained no-op tasks in {noop:.2f} s = "
            f"{noop / args.noop_tasks * 1000:.0f} ms per task (process start of `true` included)"
        )


if __name__ == "__main__":
    main()
