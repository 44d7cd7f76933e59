"""A pod's template run on this machine, as Argo's executor would run the pod: its process
made from the template's kind (``flows.local.pods.container``, ``script``, ``jobs``,
``services``), started by the run's task handler (``flows.local.pods.processes``) under the
workflow's ``parallelism``, tried again as its ``retryStrategy`` says
(``flows.local.pods.retry``), its output parameters and ``outputs.result`` read back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from flows.local.errors import UnsupportedFeature
from flows.local.pods.container import container_process
from flows.local.pods.jobs import finished_status, resource_process
from flows.local.pods.outputs import read_outputs, small_files
from flows.local.pods.processes import ProcessSpec, start_process
from flows.local.pods.retry import Backoff, fill_retry_variables, read_result
from flows.local.pods.script import script_process
from flows.local.pods.services import ServiceFailed, ServiceSpec
from flows.local.records import TaskRecord, TaskState, file_name
from flows.local.signals import STOP_MESSAGE
from flows.local.state import RunState


def run_pod(state: RunState, name: str, template: dict[str, Any], record: TaskRecord) -> None:
    """A pod's template (its tags filled in) run as a local process, attempt after attempt
    as its ``retryStrategy`` allows; its outputs read back into ``record``."""
    name = file_name(name)
    task_dir = state.run_dir / "tasks" / name
    log = state.run_dir / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    backoff = Backoff.of(template)
    attempt, last_seconds = -1, 0.0
    while attempt < backoff.limit:
        attempt += 1
        if state.stopping.is_set():
            raise OSError("stopped")
        record.attempts = attempt + 1
        attempt_template = fill_retry_variables(template, attempt, record, last_seconds)
        process, document = _process(state, attempt_template, task_dir)
        process.deadline_s = backoff.attempt_deadline(process.deadline_s, attempt)
        process.stdout_path = task_dir / "stdout"
        for local in process.path_map.values():  # /tmp of /tmp/result.txt is in a pod
            local.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as handle:
            handle.write(f"--- attempt {attempt + 1}: {' '.join(process.argv)}\n")
        spawned = time.perf_counter()
        if isinstance(process, ServiceSpec):  # outlives the node: the run's services
            code = _serve(state, process, record, log)
        elif state.pod_slots is None:
            code = state.handler.run(process, log, record.tail)
        else:
            with state.pod_slots:
                code = state.handler.run(process, log, record.tail)
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
        if state.sleep is time.sleep:
            state.stopping.wait(wait_s)  # a stop ends the wait
        else:
            state.sleep(wait_s)
    record.state = TaskState.FAILED
    record.message = (
        "Step exceeded its deadline"
        if state.deadline_passed.is_set()
        else STOP_MESSAGE
        if state.stopping.is_set()
        else backoff.gave_up
        or f"exited with code {record.exit_code} after {record.attempts} attempt(s)"
    )


def _serve(state: RunState, spec: ServiceSpec, record: TaskRecord, log: Path) -> int:
    """An InferenceService's apply (ready, or ``ServiceFailed``) or delete."""
    if not spec.delete:
        try:
            launch = getattr(state.handler, "start_service", start_process)
            return state.services.apply(spec, record.name, log, record.tail, state.stopping, launch)
        except ServiceFailed as exc:
            record.exit_code = exc.code
            raise
    line = state.services.delete(spec.name)
    record.tail.append(line)
    with open(log, "a") as handle:
        handle.write(line + "\n")
    return 0


def _process(
    state: RunState, template: dict[str, Any], task_dir: Path
) -> tuple[ProcessSpec, dict | None]:
    task_dir.mkdir(parents=True, exist_ok=True)
    if "container" in template:
        return container_process(template, task_dir, state.cwd, state.env), None
    if "script" in template:
        return script_process(template, task_dir, state.cwd, state.env), None
    if "resource" in template:
        return resource_process(template, task_dir, state.cwd, state.env, state.services.port_for)
    raise UnsupportedFeature(
        f"template {template['name']}: only container, script and resource templates run as pods"
    )
