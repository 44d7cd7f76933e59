"""What a local run shows: a live table of tasks and the running task's log tail on a
terminal, one line per state change elsewhere, and a summary at the end."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.markdown import Markdown
from rich.panel import Panel
from rich.table import Table

from flows.local.status import RunResult, TaskRecord, TaskState, file_name

if TYPE_CHECKING:
    from flows.local.workflow import LocalRunner

STYLE = {
    TaskState.PENDING: "dim",
    TaskState.RUNNING: "bold cyan",
    TaskState.SUCCEEDED: "green",
    TaskState.CACHED: "green",
    TaskState.FAILED: "bold red",
    TaskState.ERROR: "bold red",
    TaskState.OMITTED: "dim",
    TaskState.SKIPPED: "dim",
}
TAIL_LINES = 8
# What libraries log at start-up, in a running task's panel only (its log keeps them): they
# would push the step's own lines out of the panel's last few. MLflow's INFO records
# ("2026/11/27 15:15:54 INFO mlflow.system_metrics...") and torch's note that a CPU machine
# has no CUDA runtime ("W1127 15:15:58.998000 11183 torch/utils/cpp_extension.py:183] No
# CUDA runtime is found").
NOISE = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d INFO mlflow\.|\] No CUDA runtime is found")
# A task that never started, folded into one line per state and cause in the summary.
FOLDED = (TaskState.OMITTED, TaskState.SKIPPED)


def _records(runner: LocalRunner) -> list[TaskRecord]:
    return [*runner.tasks.values(), *([runner.exit_task] if runner.exit_task else [])]


def task_table(runner: LocalRunner, title: str | None = None, fold: bool = False) -> Table:
    """The task table; ``fold``: tasks that never started (Omitted, Skipped) left to
    ``folded_lines``."""
    pending = f": Pending ({runner.message})" if runner.message else ""
    table = Table(title=title or f"workflow {runner.name}{pending}", title_justify="left")
    for column in ("task", "template", "state", "attempt", "seconds", "note"):
        table.add_column(column, justify="right" if column in ("attempt", "seconds") else "left")
    for record in _records(runner):
        if fold and record.state in FOLDED:
            continue
        table.add_row(
            record.name,
            record.template,
            f"[{STYLE[record.state]}]{record.state.value}[/]",
            str(record.attempts or ""),
            f"{record.seconds:.1f}" if record.started else "",
            record.message,
        )
    return table


def folded_lines(runner: LocalRunner) -> list[str]:
    """One line per state and cause for the tasks that never started: ``7 Omitted (depends
    condition not met): train, optimize, ...``."""
    causes: dict[tuple[str, str], list[str]] = {}
    for record in _records(runner):
        if record.state in FOLDED:
            cause = record.message.removeprefix("omitted: ") or "no reason given"
            causes.setdefault((record.state.value, cause), []).append(record.name)
    return [
        f"{len(names)} {state} ({cause}): {', '.join(names)}"
        for (state, cause), names in causes.items()
    ]


class LiveView:
    """``on_change`` for a LocalRunner; use as a context manager around ``run()``."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.lock = threading.Lock()
        self.seen: dict[str, tuple[TaskState, int]] = {}
        self.message = ""  # the workflow's own message last shown (a wait for a lock)
        self.live: Live | None = None
        self.runner: LocalRunner | None = None

    def __enter__(self) -> LiveView:
        if self.console.is_terminal:
            # transient: the summary's table replaces the live one, not printed below it
            self.live = Live(
                console=self.console,
                refresh_per_second=4,
                get_renderable=self._render,
                transient=True,
            )
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.__exit__(None, None, None)

    def _render(self) -> Any:
        if self.runner is None:
            return ""
        parts: list[Any] = [task_table(self.runner)]
        for record in _records(self.runner):
            if record.state is not TaskState.RUNNING:
                continue
            shown = [line for line in record.tail if not NOISE.search(line)]
            if shown:
                text = "\n".join(shown[-TAIL_LINES:])
                parts.append(Panel(text, title=f"{record.name} log", title_align="left"))
        return Group(*parts)

    def __call__(self, runner: LocalRunner) -> None:
        with self.lock:
            self.runner = runner
            if self.live:
                return
            if runner.message != self.message:
                self.message = runner.message
                if runner.message:
                    line = f"[{runner.name}] workflow: Pending ({runner.message})"
                    self.console.print(line, markup=False, highlight=False)
            for record in _records(runner):
                key = (record.state, record.attempts)
                if self.seen.get(record.name) != key and record.state is not TaskState.PENDING:
                    self.seen[record.name] = key
                    note = f" ({record.message})" if record.message else ""
                    attempt = f" attempt {record.attempts}" if record.attempts > 1 else ""
                    line = f"[{runner.name}] {record.name}: {record.state.value}{attempt}{note}"
                    self.console.print(line, markup=False, highlight=False)


def print_tasks(runner: LocalRunner, console: Console, title: str) -> None:
    """The final task table (once: the live one is gone), tasks that never ran folded."""
    console.print(task_table(runner, title=title, fold=True))
    for line in folded_lines(runner):
        console.print(line, markup=False, highlight=False)


def print_summary(result: RunResult, runner: LocalRunner, console: Console) -> None:
    """The final table, the failed task's log tail, outputs and any Markdown report."""
    print_tasks(
        runner, console, f"workflow {result.name}: {result.status} in {result.seconds:.1f} s"
    )
    failed = result.failed_task
    if failed:
        log = result.run_dir / "logs" / f"{file_name(failed.name)}.log"
        console.print(
            f"task {failed.name} failed: {failed.message}; last lines of {log}:",
            style="bold red",
            highlight=False,
        )
        for line in list(failed.tail)[-20:] or ["(no output)"]:
            console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    services = runner.services.describe()
    stopped = {s["url"] for s in services.values() if s["state"] == "Stopped"}
    outputs = Table("task", "output", "value", title="outputs", title_justify="left")
    for record in runner.tasks.values():
        for key, value in record.outputs.items():
            if len(value) <= 200 and "\n" not in value:
                note = " (stopped with the run)" if value in stopped else ""
                outputs.add_row(record.name, key, value + note)
    if outputs.row_count:
        console.print(outputs)
    for key, value in runner.globals.items():  # whole, unwrapped: links to click or copy
        if key.startswith("workflow.outputs.parameters.") and "\n" not in value:
            console.print(f"{key.rsplit('.', 1)[-1]}: {value}", markup=False, highlight=False)
    for name, service in services.items():  # stopped with the run
        console.print(
            f"InferenceService {name}: {service['url']} (task {service['task']}, "
            f"{service['state']} at the end of the run; log {service['log']})",
            markup=False,
            highlight=False,
        )
    for report in sorted(Path(result.run_dir, "artifacts").glob("*/*.md")):
        console.print(Panel(Markdown(report.read_text()), title=str(report), title_align="left"))
    console.print(f"run directory: {result.run_dir}", highlight=False)
