"""``run_local``: a workflow run here with a live view and a summary; what
``python flows/cifar.py`` (no mode flag) calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from flows.local.signals import as_stop
from flows.local.view import LiveView, print_summary
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
) -> int:
    """Run a Hera Workflow (or its manifest) here with live progress and a summary.

    Returns the exit status for the CLI: 0 succeeded, 1 failed, 130 / 143 / 129 stopped by
    SIGINT / SIGTERM / SIGHUP. The manifest carries everything the run needs.
    """
    console = console or Console(stderr=True, soft_wrap=True)
    templates = workflow_templates or []
    view = LiveView(console)
    if resume is not None:
        runner = LocalRunner.resume(Path(resume), on_change=view, cache_dir=cache_dir)
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
        )
        console.print(f"Running workflow {runner.name} locally; logs in {runner.run_dir}/logs")
    try:
        with view:
            result = runner.run()
    except KeyboardInterrupt as exc:
        stop = as_stop(exc)
        console.print(
            f"Stopped by {stop.signal_name} (as `argo stop`: workflow Failed, the exit handler "
            f"ran); continue with: python flows/cifar.py --resume {runner.run_dir}"
        )
        return stop.exit_code
    print_summary(result, runner, console)
    if result.status != "Succeeded":
        console.print(f"Continue after a fix with: python flows/cifar.py --resume {runner.run_dir}")
    return 0 if result.status == "Succeeded" else 1
