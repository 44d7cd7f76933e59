"""A run's pods on this machine, as Argo's executor would run each pod: its process made
from the template's kind (``flows.local.pods.container``, ``script``, ``jobs``,
``services``), started by the run's task handler (``flows.local.pods.processes``) under the
workflow's ``parallelism``, tried again as its ``retryStrategy`` says
(``flows.local.pods.retry``), its output parameters and ``outputs.result`` read back
(``flows.local.pods.outputs``). ``Pods.stop`` ends them all (a signal, the deadline)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flows.local.errors import UnsupportedFeature
from flows.local.pods.container import container_process
from flows.local.pods.jobs import finished_status, resource_process
from flows.local.pods.outputs import read_outputs, read_result, small_files
from flows.local.pods.processes import ProcessSpec, TaskHandler
from flows.local.pods.retry import Backoff, fill_retry_variables
from flows.local.pods.script import script_process
from flows.local.pods.services import LocalServices, ServiceFailed, ServiceSpec
from flows.local.state import RunState
from flows.local.status import TaskRecord, TaskState, file_name


class Pods:
    """How this run's pods run: ``handler`` starts their processes (swappable in tests),
    ``services`` keeps its InferenceServices up until the run ends, ``slots`` is the
    workflow's ``parallelism`` (Argo counts its pods), ``env`` their base environment, and
    ``wait(seconds)`` the pause before a retry (by default until the backoff passed or the
    run stops; a test gives its own clock)."""

    def __init__(
        self,
        state: RunState,
        handler: TaskHandler,
        env: dict[str, str],
        parallelism: int | None = None,
        wait: Callable[[float], object] | None = None,
    ) -> None:
        self.state, self.handler, self.env = state, handler, env
        self.services = LocalServices()
        self.slots = threading.BoundedSemaphore(parallelism) if parallelism else None
        self.wait = wait or state.stopping.wait

    def stop(self) -> None:
        """Start nothing more and stop the running processes (a signal, a deadline)."""
        self.state.stopping.set()
        self.handler.interrupt()

    def restart(self) -> None:
        """Start pods again after a stop: the exit handler's run after the entrypoint's."""
        self.state.stopping.clear()
        self.handler.reset()

    def run(self, record: TaskRecord, template: dict[str, Any]) -> None:
        """A pod's template (its tags filled in) as a local process, attempt after attempt
        as its ``retryStrategy`` allows; its phase and outputs go to ``record``."""
        state = self.state
        name = file_name(record.name)
        task_dir = state.run_dir / "tasks" / name
        log = state.run_dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        backoff = Backoff.of(template)
        attempt, last_seconds = -1, 0.0
        while attempt < backoff.limit and not state.stopping.is_set():
            attempt += 1
            record.attempts = attempt + 1
            attempt_template = fill_retry_variables(template, attempt, record, last_seconds)
            process, document = self._process(attempt_template, task_dir)
            process.deadline_s = backoff.attempt_deadline(process.deadline_s, attempt)
            process.stdout_path = task_dir / "stdout"
            for local in process.path_map.values():  # /tmp of /tmp/result.txt is in a pod
                local.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a") as handle:
                handle.write(f"--- attempt {attempt + 1}: {' '.join(process.argv)}\n")
            spawned = time.perf_counter()
            code = self._start(process, record, log)
            last_seconds = time.perf_counter() - spawned
            record.process_seconds += last_seconds
            record.exit_code = code
            record.result = read_result(process.stdout_path)
            if code == 0:
                if document is not None:  # as the Training Operator reports a finished job
                    document["status"] = finished_status(document)
                record.outputs = read_outputs(
                    template, process.path_map, document, state.run_dir / "artifacts" / name
                )
                if document is not None:  # what rank 0 reported, for the summary only
                    record.outputs.update(small_files(task_dir / "outputs"))
                record.state, record.message = TaskState.SUCCEEDED, ""
                return
            wait_s, give_up = backoff.after_failure(attempt)
            if attempt == backoff.limit or give_up or state.stopping.is_set():
                break
            if not backoff.expression_allows(record, last_seconds):
                break
            record.message = f"attempt {attempt + 1} exited {code}; retrying in {wait_s:g} s"
            state.on_change()
            self.wait(wait_s)
        record.state = TaskState.FAILED
        record.message = (
            state.stopped_message()
            if state.stopping.is_set()
            else backoff.gave_up
            or f"exited with code {record.exit_code} after {record.attempts} attempt(s)"
        )

    def _start(self, process: ProcessSpec, record: TaskRecord, log: Path) -> int:
        """One attempt's process to its end: an InferenceService's apply or delete for the
        run's services, anything else through the handler in a parallelism slot."""
        if isinstance(process, ServiceSpec):  # outlives the node: the run's services
            return self._serve(process, record, log)
        if self.slots is None:
            return self.handler.run(process, log, record.tail)
        with self.slots:
            return self.handler.run(process, log, record.tail)

    def _serve(self, spec: ServiceSpec, record: TaskRecord, log: Path) -> int:
        """An InferenceService's apply (ready, or ``ServiceFailed``) or delete."""
        if not spec.delete:
            try:
                return self.services.apply(
                    spec, record.name, log, record.tail, self.state.stopping,
                    self.handler.start_service,
                )  # fmt: skip
            except ServiceFailed as exc:
                record.exit_code = exc.code
                raise
        line = self.services.delete(spec.name)
        record.tail.append(line)
        with open(log, "a") as handle:
            handle.write(line + "\n")
        return 0

    def _process(self, template: dict[str, Any], task_dir: Path) -> tuple[ProcessSpec, dict | None]:
        task_dir.mkdir(parents=True, exist_ok=True)
        cwd, env = self.state.cwd, self.env
        if "container" in template:
            return container_process(template, task_dir, cwd, env), None
        if "script" in template:
            return script_process(template, task_dir, cwd, env), None
        if "resource" in template:
            return resource_process(template, task_dir, cwd, env, self.services.port_for)
        raise UnsupportedFeature(
            f"template {template['name']}: only container, script and resource templates run "
            "as pods"
        )
