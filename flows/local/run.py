"""``run_local``: a workflow run here with a live view and a summary; what
``python flows/cifar.py`` (no mode flag) calls."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from rich.console import Console

from flows.local.review.page import PAGE, PageWriter
from flows.local.signals import as_stop
from flows.local.status import RunResult
from flows.local.view import LiveView, print_summary, print_tasks
from flows.local.workflow import LocalRunner


def run_local(
    workflow: Any,
    *,
    resume: Path | None = None,
    runs_dir: Path = Path("runs"),
    console: Any = None,
    cache_dir: Path | None = None,
    workflow_templates: list[dict[str, Any]] | None = None,
    parameters: dict[str, str] | None = None,
    closing: Closing | None = None,
    no_cache: bool = False,
    refresh: Collection[str] = (),
) -> int:
    """Run a Hera Workflow (or its manifest) here with live progress and a summary.

    Returns the exit status for the CLI: 0 succeeded, 1 failed, 130 / 143 / 129 stopped by
    SIGINT / SIGTERM / SIGHUP. The manifest carries everything the run needs. ``closing``
    gives the last lines (what to do next) from the runner and the result (None when a
    signal stopped the run); by default, how to resume a run that did not succeed.
    ``no_cache`` and ``refresh`` (task names): memo entries not taken (LocalRunner).
    """
    closing = closing or resume_hint
    console = console or Console(stderr=True, soft_wrap=True)
    templates = workflow_templates or []
    view = LiveView(console)
    page = PageWriter()  # runs/<name>/index.html, rewritten as the nodes change
    if resume is not None:
        runner = LocalRunner.resume(
            Path(resume),
            on_change=view,
            cache_dir=cache_dir,
            no_cache=no_cache,
            refresh=refresh,
            on_save=page,
        )
        console.print(f"Resuming {runner.name} from {runner.run_dir}")
    else:
        manifest = workflow if isinstance(workflow, dict) else workflow.to_dict()
        runner = LocalRunner(
            manifest,
            runs_dir,
            on_change=view,
            cache_dir=cache_dir,
            workflow_templates=[t if isinstance(t, dict) else t.to_dict() for t in templates],
            parameters=parameters,
            on_save=page,
            no_cache=no_cache,
            refresh=refresh,
        )
        console.print(f"Running workflow {runner.name} locally; logs in {runner.run_dir}/logs")
    console.print(f"Its page: {runner.run_dir / PAGE}", highlight=False)
    try:
        with view:
            result = runner.run()
    except KeyboardInterrupt as exc:
        stop = as_stop(exc)
        print_tasks(runner, console, f"workflow {runner.name}: stopped by {stop.signal_name}")
        console.print(
            f"Stopped by {stop.signal_name} (as `argo stop`: workflow Failed, the exit handler ran)"
        )
        for line in closing(runner, None):
            console.print(line, markup=False, highlight=False)
        return stop.exit_code
    print_summary(result, runner, console)
    for line in closing(runner, result):
        console.print(line, markup=False, highlight=False)
    return 0 if result.status == "Succeeded" else 1


Closing = Callable[[LocalRunner, "RunResult | None"], list[str]]


def resume_hint(runner: LocalRunner, result: RunResult | None) -> list[str]:
    """How to continue a run that did not succeed."""
    if result is not None and result.status == "Succeeded":
        return []
    verb = "Continue it" if result is None else "Continue after a fix"
    return [f"{verb} with: python flows/cifar.py --resume {runner.run_dir}"]
