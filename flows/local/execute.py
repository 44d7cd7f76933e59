"""One node of a local run: its inputs bound and its template resolved as Argo does; a DAG
or steps template runs its own nodes (``flows.local.dag``, ``flows.local.steps``); otherwise
a memo hit is reused or its process run with retries, its outputs and stdout
(``outputs.result``) read back. A mixin of ``LocalRunner``, which holds the state these
methods use."""

from __future__ import annotations

import threading
import time
import traceback
from pathlib import Path
from typing import Any

from flows.local.checks import UnsupportedFeature, substitute, substitute_all
from flows.local.expr_syntax import ExpressionError
from flows.local.gates import absent_output, check_absent, when_says_run
from flows.local.handlers import ProcessSpec, TaskHandler
from flows.local.memo import MemoCache
from flows.local.records import TaskRecord, TaskState, file_name
from flows.local.resources import finished_status, resource_process
from flows.local.retry import (
    Backoff,
    fill_retry_variables,
    read_result,
    retry_placeholders,
)
from flows.local.script import script_process
from flows.local.services import LocalServices, ServiceFailed, ServiceSpec
from flows.local.signals import STOP_MESSAGE
from flows.local.tasks import container_process, read_outputs, small_files


class TaskExecution:
    globals: dict[str, str]
    tasks: dict[str, TaskRecord]
    templates: dict[str, dict[str, Any]]
    memo: MemoCache
    cwd: Path
    env: dict[str, str]
    run_dir: Path
    handler: TaskHandler
    stopping: threading.Event
    deadline_passed: threading.Event
    sleep: Any
    on_change: Any
    services: LocalServices
    pod_slots: threading.Semaphore | None  # spec.parallelism: Argo counts the workflow's pods
    _run_composite: Any

    def _scope(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        scope = dict(self.globals)
        for name, record in list(self.tasks.items()):
            for key, value in record.outputs.items():
                scope[f"tasks.{name}.outputs.parameters.{key}"] = value
        return {**scope, **(extra or {})}

    def _bind_inputs(
        self, task: dict[str, Any], template: dict[str, Any], scope: dict[str, str]
    ) -> dict[str, str]:
        arguments = task.get("arguments", {}).get("parameters", [])
        given = {}
        for p in arguments:
            value = str(p.get("value", ""))
            if absent_output(value, scope):
                continue  # Argo drops it: the input's default applies, or it is an Error
            check_absent(value, scope)
            given[p["name"]] = substitute(value, scope)
        bound = {}
        for parameter in template.get("inputs", {}).get("parameters", []):
            name = parameter["name"]
            if name in given:
                bound[name] = given[name]
            elif "value" in parameter or "default" in parameter:
                bound[name] = substitute(
                    str(parameter.get("value", parameter.get("default"))), scope
                )
            else:
                for p in arguments:
                    if p["name"] == name:
                        check_absent(str(p.get("value", "")), scope)
                raise UnsupportedFeature(
                    f"task {task['name']}: input parameter {name} has no value"
                )
        return {f"inputs.parameters.{k}": v for k, v in bound.items()}

    def _run_task(
        self, task: dict[str, Any], record: TaskRecord, scope: dict[str, str] | None = None
    ) -> None:
        """Run ``task`` (a DAG task, a step or the entrypoint) as the node ``record``;
        ``scope``: what its arguments may refer to (default: the workflow's globals and the
        entry DAG's task outputs)."""
        record.started = time.time()
        try:
            scope = self._scope() if scope is None else scope
            run, when = when_says_run(task, scope)
            if not run:  # Argo's Skipped node: no inputs bound, nothing run
                record.state, record.kind = TaskState.SKIPPED, "Skipped"
                record.message = f"when '{when}' evaluated false"
                return
            template = self.templates[task["template"]]
            inputs = self._bind_inputs(task, template, scope)
            if "dag" in template or "steps" in template:
                self._run_composite(record, template, inputs)
                self._export_globals(template, record)
                return
            scope = {**self._scope(inputs), **retry_placeholders(template)}
            resolved = substitute_all({k: v for k, v in template.items() if k != "outputs"}, scope)
            resolved["outputs"] = template.get("outputs", {})
            hit = self.memo.get(resolved, self.cwd)
            if hit:
                record.outputs = hit[0]
                record.state, record.message = TaskState.CACHED, f"memoized: reused {hit[1].name}"
            else:
                self._execute(record.name, resolved, record)
                if record.state is TaskState.SUCCEEDED:  # Argo caches successes only
                    self.memo.put(resolved, record.outputs, self.cwd)
            self._export_globals(template, record)
        except ExpressionError as exc:  # Argo: the node is an Error, not retried
            record.state, record.message = TaskState.ERROR, str(exc)
        except (UnsupportedFeature, FileNotFoundError, OSError) as exc:
            record.state, record.message = TaskState.FAILED, str(exc)
        except Exception as exc:  # the runner's own fault: an Error node, as Argo's controller
            # marks one it cannot run; the exit handler still runs and the rest is kept
            record.state = TaskState.ERROR
            record.message = f"the local runner failed on this node: {type(exc).__name__}: {exc}"
            log = self.run_dir / "logs" / f"{file_name(record.name)}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a") as handle:
                handle.write(traceback.format_exc())
        finally:
            record.finished = time.time()

    def _export_globals(self, template: dict[str, Any], record: TaskRecord) -> None:
        for parameter in template.get("outputs", {}).get("parameters", []):
            if parameter.get("globalName") and parameter["name"] in record.outputs:
                self.globals[f"workflow.outputs.parameters.{parameter['globalName']}"] = (
                    record.outputs[parameter["name"]]
                )

    def _execute(self, name: str, template: dict[str, Any], record: TaskRecord) -> None:
        name = file_name(name)
        task_dir = self.run_dir / "tasks" / name
        log = self.run_dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        backoff = Backoff.of(template)
        attempt, last_seconds = -1, 0.0
        while attempt < backoff.limit:
            attempt += 1
            if self.stopping.is_set():
                raise OSError("stopped")
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
            if isinstance(process, ServiceSpec):  # outlives the node: the run's services
                code = self._serve(process, record, log)
            elif self.pod_slots is None:
                code = self.handler.run(process, log, record.tail)
            else:
                with self.pod_slots:
                    code = self.handler.run(process, log, record.tail)
            last_seconds = time.perf_counter() - spawned
            record.process_seconds += last_seconds
            record.exit_code = code
            record.result = read_result(process.stdout_path)
            if code == 0:
                if document is not None:  # as the Training Operator reports a finished job
                    document["status"] = finished_status(document)
                record.outputs = read_outputs(
                    template, process.path_map, document, self.run_dir / "artifacts" / name
                )
                if document is not None:  # what rank 0 reported, for the summary only
                    record.outputs.update(small_files(task_dir / "outputs"))
                record.state, record.message = TaskState.SUCCEEDED, ""
                return
            wait_s, give_up = backoff.after_failure(attempt)
            if attempt == backoff.limit or give_up or self.stopping.is_set():
                break
            if not backoff.expression_allows(record, last_seconds):
                break
            record.message = f"attempt {attempt + 1} exited {code}; retrying in {wait_s:g} s"
            self.on_change(self)
            if self.sleep is time.sleep:
                self.stopping.wait(wait_s)  # a stop ends the wait
            else:
                self.sleep(wait_s)
        record.state = TaskState.FAILED
        record.message = (
            "Step exceeded its deadline"
            if self.deadline_passed.is_set()
            else STOP_MESSAGE
            if self.stopping.is_set()
            else backoff.gave_up
            or f"exited with code {record.exit_code} after {record.attempts} attempt(s)"
        )

    def _serve(self, spec: ServiceSpec, record: TaskRecord, log: Path) -> int:
        """An InferenceService's apply (ready, or ``ServiceFailed``) or delete."""
        if not spec.delete:
            try:
                return self.services.apply(spec, record.name, log, record.tail, self.stopping)
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
        if "container" in template:
            return container_process(template, task_dir, self.cwd, self.env), None
        if "script" in template:
            return script_process(template, task_dir, self.cwd, self.env), None
        if "resource" in template:
            return resource_process(template, task_dir, self.cwd, self.env, self.services.port_for)
        raise UnsupportedFeature(
            f"template {template['name']}: only container, script and resource templates "
            "run as pods"
        )
