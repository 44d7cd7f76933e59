"""One DAG task of a local run: its inputs bound and its template resolved as Argo does,
a memo hit reused or its process run with retries, its outputs read back. A mixin of
``LocalRunner``, which holds the state these methods use."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

from flows.local.checks import UnsupportedFeature, parse_duration, substitute, substitute_all
from flows.local.expr_syntax import ExpressionError
from flows.local.gates import absent_output, check_absent, task_variables, when_says_run
from flows.local.handlers import ProcessSpec, TaskHandler
from flows.local.memo import MemoCache
from flows.local.records import TaskRecord, TaskState
from flows.local.resources import finished_status, resource_process
from flows.local.signals import STOP_MESSAGE
from flows.local.tasks import container_process, read_outputs, small_files


class TaskExecution:
    globals: dict[str, str]
    entry_inputs: dict[str, str]
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

    def _scope(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        scope = {**self.globals, **self.entry_inputs}
        for name, record in self.tasks.items():
            scope.update(task_variables(name, record, self.templates.get(record.template, {})))
        return {**scope, **(extra or {})}

    def _bind_inputs(self, task: dict[str, Any], template: dict[str, Any]) -> dict[str, str]:
        scope = self._scope()
        given = {}
        for p in task.get("arguments", {}).get("parameters", []):
            value = str(p.get("value", ""))
            if absent_output(value, scope, self.tasks):
                continue  # Argo drops it: the input's default applies, or it is an Error
            check_absent(value, scope, self.tasks)
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
                for p in task.get("arguments", {}).get("parameters", []):
                    if p["name"] == name:
                        check_absent(str(p.get("value", "")), {}, self.tasks)
                raise UnsupportedFeature(
                    f"task {task['name']}: input parameter {name} has no value"
                )
        return {f"inputs.parameters.{k}": v for k, v in bound.items()}

    def _run_task(self, task: dict[str, Any], record: TaskRecord) -> None:
        record.started = time.time()
        try:
            run, when = when_says_run(task, self._scope())
            if not run:  # Argo's Skipped node: no inputs bound, nothing run
                record.state, record.message = TaskState.SKIPPED, f"when '{when}' evaluated false"
                return
            template = self.templates[task["template"]]
            inputs = self._bind_inputs(task, template)
            resolved = substitute_all(
                {k: v for k, v in template.items() if k != "outputs"}, self._scope(inputs)
            )
            resolved["outputs"] = template.get("outputs", {})
            hit = self.memo.get(resolved, self.cwd)
            if hit:
                record.outputs = hit[0]
                record.state, record.message = TaskState.CACHED, f"memoized: reused {hit[1].name}"
            else:
                self._execute(task["name"], resolved, record)
                if record.state is TaskState.SUCCEEDED:  # Argo caches successes only
                    self.memo.put(resolved, record.outputs, self.cwd)
            for parameter in template.get("outputs", {}).get("parameters", []):
                if parameter.get("globalName") and parameter["name"] in record.outputs:
                    self.globals[f"workflow.outputs.parameters.{parameter['globalName']}"] = (
                        record.outputs[parameter["name"]]
                    )
        except ExpressionError as exc:  # Argo: the node is an Error, not retried
            record.state, record.message = TaskState.ERRORED, str(exc)
        except (UnsupportedFeature, FileNotFoundError, OSError) as exc:
            record.state, record.message = TaskState.FAILED, str(exc)
        finally:
            record.finished = time.time()

    def _execute(self, name: str, template: dict[str, Any], record: TaskRecord) -> None:
        task_dir = self.run_dir / "tasks" / name
        log = self.run_dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        retry = template.get("retryStrategy")
        # Argo: no limit (``retryStrategy: {}``) retries until it succeeds; a non-zero exit
        # is a Failure, which OnError and OnTransientError do not retry.
        limit = 0 if retry is None else int(retry.get("limit", sys.maxsize))
        if retry and retry.get("retryPolicy") in ("OnError", "OnTransientError"):
            limit = 0
        retry = retry or {}
        backoff = retry.get("backoff", {})
        delay = parse_duration(backoff.get("duration", "0"))
        factor = float(backoff.get("factor", 1) or 1)
        max_total = parse_duration(backoff["maxDuration"]) if "maxDuration" in backoff else None
        first = time.time()
        attempt = -1
        while attempt < limit:
            attempt += 1
            if self.stopping.is_set():
                raise OSError("stopped")
            record.attempts = attempt + 1
            process, document = self._process(template, task_dir)
            for local_dir in process.path_map.values():  # e.g. /tmp of /tmp/result.txt
                local_dir.mkdir(parents=True, exist_ok=True)
            with open(log, "a") as handle:
                handle.write(f"--- attempt {attempt + 1}: {' '.join(process.argv)}\n")
            spawned = time.perf_counter()
            code = self.handler.run(process, log, record.tail)
            record.process_seconds += time.perf_counter() - spawned
            record.exit_code = code
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
            wait_s = delay * factor**attempt
            out_of_time = max_total is not None and time.time() - first + wait_s > max_total
            if attempt == limit or out_of_time or self.stopping.is_set():
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
            else f"exited with code {record.exit_code} after {record.attempts} attempt(s)"
        )

    def _process(self, template: dict[str, Any], task_dir: Path) -> tuple[ProcessSpec, dict | None]:
        task_dir.mkdir(parents=True, exist_ok=True)
        if "container" in template:
            return container_process(template, task_dir, self.cwd, self.env), None
        if "resource" in template:
            return resource_process(template, task_dir, self.cwd, self.env)
        raise UnsupportedFeature(
            f"template {template['name']}: only container and resource templates run as tasks"
        )
