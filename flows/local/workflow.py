"""Run an Argo Workflow (the Hera object ``--render`` prints) on this machine.

DAG tasks start in dependency order (independent ones side by side), each pod's template as
a local process (``flows.local.pods``), parameters substituted as Argo would, output
parameters read from the files the templates declare, retries and deadlines honoured,
memoized templates served from a local cache, and the exit handler run at the end
whatever happened. The run directory ``runs/<workflow name>/`` keeps each task's log and
a ``state.json`` from which ``resume`` continues a failed or interrupted run.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from flows.local.checks.fields import unsupported
from flows.local.checks.lint import lint
from flows.local.errors import UnsupportedFeature
from flows.local.memo_cache import MemoCache, default_cache_dir, with_dependents
from flows.local.nodes.node import run_node
from flows.local.pods.manifest import serves
from flows.local.pods.pod import Pods
from flows.local.pods.processes import SubprocessHandler, TaskHandler
from flows.local.pods.services import LocalServices
from flows.local.signals import STOP_MESSAGE, RunStopped, as_stop, stop_on_signals
from flows.local.state import RunState
from flows.local.status import RunResult, TaskRecord, TaskState
from flows.local.synchronization import default_lock_dir, held, mutex_names
from flows.local.template_ref import resolve
from flows.local.variables import failures_json, start_globals


class LocalRunner:
    """Executes one workflow manifest. Its run's state (``state``: the node records, the
    globals, the stop events) and its pods (``pods``: the task handler, swappable in
    tests, the InferenceServices, the workflow's parallelism) go to
    ``flows.local.nodes.node.run_node``, for the entrypoint and then the exit handler."""

    def __init__(
        self,
        manifest: dict[str, Any],
        runs_dir: Path,
        *,
        handler: TaskHandler | None = None,
        cache_dir: Path | None = None,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        on_change: Any = None,
        sleep: Any = None,
        workflow_templates: list[dict[str, Any]] | None = None,
        parameters: dict[str, str] | None = None,
        lock_dir: Path | None = None,
        on_save: Callable[[Path], None] | None = None,
        no_cache: bool = False,
        refresh: Collection[str] = (),
    ) -> None:
        """``no_cache``: no memo entry is taken (successes are still stored); ``refresh``:
        none for these tasks of the entrypoint's DAG and every task that depends on one."""
        manifest = resolve(manifest, workflow_templates or (), parameters)
        problems = unsupported(manifest) + lint(manifest)
        if problems:
            raise UnsupportedFeature("the local runner does not implement: " + "; ".join(problems))
        self.manifest = manifest
        spec = manifest["spec"]
        self.templates = {t["name"]: t for t in spec["templates"]}
        self.name = manifest["metadata"].get("name") or (
            manifest["metadata"].get("generateName", "workflow-") + uuid.uuid4().hex[:5]
        )
        self.run_dir = Path(runs_dir) / self.name
        self.on_change = on_change or (lambda runner: None)
        self.on_save = on_save  # state.json written: what follows it (the run's page)
        entry_tasks = self.templates[spec["entrypoint"]].get("dag", {}).get("tasks", [])
        memo = MemoCache(
            cache_dir or default_cache_dir(),
            no_cache=no_cache,
            refresh=with_dependents(entry_tasks, refresh) if refresh else (),
        )
        self.state = RunState(
            name=self.name,
            manifest=manifest,
            run_dir=self.run_dir,
            templates=self.templates,
            memo=memo,
            cwd=cwd or Path.cwd(),
            on_change=self._changed,
        )
        limit = spec.get("parallelism")
        self.pods = Pods(
            self.state,
            handler or SubprocessHandler(),
            dict(os.environ if env is None else env),
            parallelism=int(limit) if limit else None,
            wait=sleep,  # a test's clock; by default the backoff waits until a stop
        )
        self.globals.update(start_globals(manifest, self.name))
        # spec.synchronization: one run at a time per mutex, across this machine's runs
        self.mutexes = mutex_names(spec, self.globals["workflow.namespace"])
        self.lock_dir = lock_dir or default_lock_dir()
        self.message = ""  # the workflow's own message (Argo's status.message): a wait
        entry = self.templates[spec["entrypoint"]]
        # the entrypoint is the root node: it gets the workflow's arguments as its inputs
        self.entry_task = {
            "name": spec["entrypoint"],
            "template": spec["entrypoint"],
            "arguments": spec.get("arguments", {}),
        }
        composite = "dag" in entry or "steps" in entry
        self.root = TaskRecord("" if composite else self.name, spec["entrypoint"])
        self.state.root = self.root
        deadline = spec.get("activeDeadlineSeconds")
        self.deadline_s = float(deadline) if deadline not in (None, "") else None
        # the entry DAG's tasks show as Pending from the start; other nodes as they are made
        tasks = entry.get("dag", {}).get("tasks", [])
        self.tasks.update({t["name"]: TaskRecord(t["name"], t["template"]) for t in tasks})
        if not composite:
            self.tasks[self.name] = self.root
        exit_name = spec.get("onExit")
        self.state.exit_task = TaskRecord("onExit", exit_name) if exit_name else None
        self.started = time.time()

    @property
    def tasks(self) -> dict[str, TaskRecord]:
        """Every node by its key (``state.tasks``)."""
        return self.state.tasks

    @property
    def globals(self) -> dict[str, str]:
        """The workflow's variables: ``workflow.*`` (``state.globals``)."""
        return self.state.globals

    @property
    def exit_task(self) -> TaskRecord | None:
        """The exit handler's node (``state.exit_task``), None without ``onExit``."""
        return self.state.exit_task

    @property
    def services(self) -> LocalServices:
        """The run's InferenceServices, up until the run ends (``pods.services``)."""
        return self.pods.services

    def save_state(self) -> None:
        self.state.save(self.pods.services.describe())
        if self.on_save:
            self.on_save(self.run_dir)

    def _changed(self) -> None:
        """Nodes started or finished: the state on disk and the view follow."""
        self.save_state()
        self.on_change(self)

    @classmethod
    def resume(cls, run_dir: Path, **kwargs: Any) -> LocalRunner:
        """Continue a run: tasks that succeeded keep their outputs, the rest run again."""
        state = json.loads((Path(run_dir) / "state.json").read_text())
        manifest = dict(state["manifest"])
        manifest["metadata"] = {**manifest["metadata"], "name": state["name"]}
        runner = cls(manifest, Path(run_dir).parent, **kwargs)
        runner.globals.update({k: v for k, v in state["globals"].items() if k != "workflow.status"})
        for name, saved in state["tasks"].items():
            # the exit handler runs again whole, as `argo retry` deletes every node under
            # <wf>.onExit (argo-workflows v4.0.5 workflow/util/util.go FormulateRetryWorkflow)
            if name.split(".", 1)[0] == "onExit":
                continue
            # an InferenceService's process ended with the earlier runner: deployed again
            if serves(runner.templates.get(saved["template"], {})):
                continue
            if TaskState(saved["state"]).done_ok:
                record = runner.tasks.setdefault(name, TaskRecord(name, saved["template"]))
                record.state, record.outputs = TaskState(saved["state"]), saved["outputs"]
                record.result, record.kind = saved.get("result"), saved.get("kind", "Pod")
                record.attempts, record.message = saved["attempts"], "kept from the earlier run"
                record.children = list(saved.get("children", []))  # a TaskGroup's items
                # its times as the earlier run recorded them, as `argo retry` keeps a node's
                record.started, record.finished = saved.get("started"), saved.get("finished")
                runner.state.kept.add(name)
        return runner

    # --- the run ------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run to the end; a stop signal (see ``flows.local.signals``) raises ``RunStopped``
        after the exit handler ran and ``state.json`` was written."""
        with stop_on_signals():
            try:
                status = self._run_to_end()
            finally:  # whatever happened: no InferenceService outlives the run
                self.pods.services.stop_all()
                self.save_state()
        return RunResult(
            self.name, status, self.run_dir, self.tasks, self.globals, time.time() - self.started
        )

    def _run_to_end(self) -> str:
        self.save_state()
        with contextlib.ExitStack() as locks:  # held until the exit handler ended
            try:
                locks.enter_context(
                    held(self.mutexes, self.lock_dir, self.state.stopping, self._waiting)
                )
                status = self._run_entry()
            except KeyboardInterrupt as exc:
                stop = as_stop(exc)
                for record in self.tasks.values():
                    if record.state is TaskState.RUNNING:  # its thread was stopped first
                        record.state, record.message = TaskState.FAILED, STOP_MESSAGE
                        record.finished = time.time()
                self._finish("Failed", stop)
                raise stop from None
            self._finish(status, None)
        if self.exit_task and self.exit_task.state.failed:  # Failed or Error
            status = self.globals["workflow.status"] = "Failed"  # as Argo marks it
            self.save_state()
        return status

    def _waiting(self, message: str) -> None:
        """Pending for a mutex another run holds (Argo's message), or no longer ("")."""
        self.message = message
        if not message:
            self.started = time.time()  # the run starts once it holds its locks
        self._changed()

    def _finish(self, status: str, stop: RunStopped | None) -> None:
        """Argo's end of a workflow: its status, duration and failures, then the exit handler.
        A second signal while the exit handler runs stops it at once."""
        self.globals["workflow.status"] = status
        self.globals["workflow.duration"] = f"{time.time() - self.started:.6f}"
        self.globals["workflow.failures"] = failures_json(list(self.tasks.values()))
        self.save_state()
        try:
            self._run_exit_handler(status)
        except KeyboardInterrupt as exc:
            second = as_stop(exc)
            self.pods.stop()
            if self.exit_task:
                self.exit_task.state = TaskState.FAILED
                self.exit_task.message = f"stopped at once by a second signal ({second})"
                self.exit_task.finished = time.time()
            self.save_state()
            print(
                f"{second.signal_name} while the exit handler ran: stopped it at once",
                file=sys.stderr,
            )
            raise (stop or second) from None

    def _run_entry(self) -> str:
        """The entrypoint as the root node; the workflow ends in its phase."""
        timer = threading.Timer(self.deadline_s, self._deadline) if self.deadline_s else None
        if timer:
            timer.daemon = True
            timer.start()
        try:
            self.root.state = TaskState.RUNNING
            run_node(self.state, self.pods, self.entry_task, self.root, dict(self.globals))
        except BaseException:
            # Ctrl-C: stop the processes first, or the pool would wait for them.
            self.pods.stop()
            raise
        finally:
            if timer:
                timer.cancel()
        if self.root.state.done_ok:
            return "Succeeded"
        return "Error" if self.root.state is TaskState.ERROR else "Failed"

    def _deadline(self) -> None:
        """Workflow activeDeadlineSeconds: Argo fails the running nodes and schedules none."""
        self.state.deadline_passed.set()
        self.pods.stop()

    # --- the exit handler ------------------------------------------------------------------------
    def _run_exit_handler(self, status: str) -> None:
        if not self.exit_task:
            return
        record = self.exit_task
        record.state = TaskState.RUNNING
        self.pods.restart()  # the exit handler's processes start after a stop too
        task = {"name": "onExit", "template": record.template}
        self.globals["workflow.status"] = status
        run_node(self.state, self.pods, task, record)
        self.save_state()  # the handler's own record too
        self.on_change(self)
