"""A KServe InferenceService as a local process that outlives its node.

``action: apply`` of a ``serving.kserve.io/v1beta1`` InferenceService starts its
predictor's first container (command + args, env with Secrets from this environment as
for a pod) on a free port of 127.0.0.1: env ``PORT``, and ``--port`` / ``--host`` in the
args rewritten to that port and 127.0.0.1. The node succeeds once the container's
readinessProbe ``httpGet`` path answers 200 there (no probe: once the port accepts a
connection, as a container without one is Ready once started), within the template's
``activeDeadlineSeconds`` (default 600 s); the process exiting first or the deadline
passing fails it with one line, the process stopped. Its ``status`` then holds what
KServe v0.19.0 reports for a ready service (pkg/apis/serving/v1beta1
inference_service_status.go: ``url``, ``address.url``, condition ``Ready``), the URL
``http://127.0.0.1:<port>``, so ``{.status.url}`` / ``{.status.address.url}`` outputs read
it. The resource's success/failureCondition are not evaluated: readiness stands in for
them, as torchrun's exit does for a job's conditions.

``LocalServices`` keeps the run's services: a second apply of the same name replaces the
process at the same URL (the old one stopped first; on the cluster the Service's address
stays too, so a task given the first URL reaches the new model), a delete stops it, and
``stop_all`` (the end of the run, whatever happened) stops every one, their process groups
and every descendant.

A re-apply over a service that is Ready succeeds at once, as on the cluster: Argo's first
GET comes right after ``kubectl apply``, before KServe reconciled the new spec, and reads
the previous version's Ready (argo-workflows v4.0.5 workflow/executor/resource.go
WaitResource polls immediately; flows/pipeline/serving_templates.py). The new process then
starts in the background and the service is Ready again once it answers; what follows the
deploy must wait for it, as serve-check waits for the version. (On the cluster the old pods serve
until the new ones are Ready; here the old process is stopped first, the port being one:
a request in between gets no answer rather than the old version.) A re-apply over a
service that is not Ready (a rollback after a new version that never became ready) waits
for its process, as Argo then reads no Ready until the rollback's pods are.

The process is started by the run's task handler when it has ``start_service(spec,
sink)`` (``SubprocessHandler`` does), so a test can start a server that is slow to become
ready, or never does, as the runner's other processes are swapped in tests.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from flows.local.errors import UnsupportedFeature
from flows.local.pods.container import container_env, local_argv
from flows.local.pods.manifest import named
from flows.local.pods.ports import free_port
from flows.local.pods.processes import ProcessSpec, SubprocessHandler, start_process
from flows.local.signals import STOP_SIGNALS

DEFAULT_READY_S = 600.0
POLL_S = 0.1  # between readiness probes: a local server is ready in well under a second
Launch = Callable[[ProcessSpec, IO[bytes]], subprocess.Popen]


@dataclass
class ServiceSpec(ProcessSpec):
    """An InferenceService's apply (``ready_path``: its readinessProbe's path) or, with
    ``delete``, the stop of the one named."""

    name: str = ""
    port: int = 0
    ready_path: str | None = None
    delete: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class ServiceFailed(OSError):
    """The service never became ready; the message is the node's one line, ``code`` the
    server's exit code if it exited."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def rewrite_args(argv: list[str], port: int) -> list[str]:
    """``--port N`` / ``--port=N`` to the local port, ``--host H`` / ``--host=H`` to
    127.0.0.1: the pod's 0.0.0.0:8080 would be every interface's, and taken."""
    values = {"--port": str(port), "--host": "127.0.0.1"}
    out: list[str] = []
    for i, arg in enumerate(argv):
        flag = arg.split("=", 1)[0]
        if i and argv[i - 1] in values:
            out.append(values[argv[i - 1]])
        elif "=" in arg and flag in values:
            out.append(f"{flag}={values[flag]}")
        else:
            out.append(arg)
    return out


def service_process(
    isvc: dict[str, Any],
    template: Mapping[str, Any],
    cwd: Path,
    base_env: Mapping[str, str],
    port_for: Callable[[str], int],
) -> tuple[ServiceSpec, dict]:
    """The predictor's first container as a process on the local port ``port_for`` its
    name gives."""
    named(isvc, "isvc-")
    name = isvc["metadata"]["name"]
    containers = isvc.get("spec", {}).get("predictor", {}).get("containers") or []
    if not containers:
        raise UnsupportedFeature(
            f"InferenceService {name}: a predictor without containers (a ServingRuntime's "
            "model server does not run locally)"
        )
    container = containers[0]
    argv = [*container.get("command", []), *container.get("args", [])]
    if not container.get("command"):
        raise UnsupportedFeature(
            f"InferenceService {name}: container {container.get('name')} has no command "
            "(the image's entrypoint is not known on this machine)"
        )
    port = port_for(name)
    env = container_env(container, base_env)
    env["PORT"] = str(port)
    deadline = template.get("activeDeadlineSeconds")
    probe = container.get("readinessProbe", {}).get("httpGet", {})
    spec = ServiceSpec(
        local_argv(rewrite_args(argv, port)),
        env,
        cwd,
        float(deadline) if deadline not in (None, "") else DEFAULT_READY_S,
        name=name,
        port=port,
        ready_path=probe.get("path") if probe else None,
    )
    url = spec.url
    isvc["status"] = {
        "url": url,
        "address": {"url": url},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    return spec, isvc


@dataclass
class Service:
    name: str
    url: str
    task: str
    log: Path
    process: subprocess.Popen
    state: str = "Starting"  # Starting | Ready | Stopped


class LocalServices:
    """The run's InferenceServices by name, kept for the rest of the run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._services: dict[str, Service] = {}
        self._closed = False  # after stop_all: a late apply is stopped at once

    def port_for(self, name: str) -> int:
        """The port of the service ``name`` this run started before (a re-apply keeps its
        URL, as the cluster's Service name does), else a free one."""
        with self._lock:
            earlier = self._services.get(name)
        return int(earlier.url.rsplit(":", 1)[1]) if earlier else free_port()

    def describe(self) -> dict[str, dict[str, Any]]:
        """What state.json and the summary show of each service."""
        with self._lock:
            return {
                n: {"url": s.url, "pid": s.process.pid, "task": s.task, "state": s.state,
                    "log": str(s.log)}
                for n, s in self._services.items()
            }  # fmt: skip

    def apply(
        self,
        spec: ServiceSpec,
        task: str,
        log: Path,
        tail: deque[str],
        stopping: threading.Event,
        launch: Launch = start_process,
    ) -> int:
        """Start (or replace) the service and wait until it is ready: 0, or a
        ``ServiceFailed`` naming why; a stop of the run while waiting: -SIGTERM. Over a
        service that is Ready: 0 at once, the new process made ready in the background."""
        with self._lock:
            earlier = self._services.get(spec.name)
        was_ready = earlier is not None and earlier.state == "Ready"
        if earlier is not None and earlier.state != "Stopped":  # a re-apply (a rollback)
            replaced = self.delete(spec.name)  # replaces the process
            tail.append(replaced)
            with open(log, "a") as handle:
                handle.write(f"{replaced}\n")
        with open(log, "ab") as sink:
            process = launch(spec, sink)
        service = Service(spec.name, spec.url, task, log, process)
        with self._lock:
            self._services[spec.name] = service
            closed = self._closed
        if was_ready and not closed:
            line = (
                f"InferenceService {spec.name}: re-applied over a Ready service, Ready as "
                f"Argo first reads it; the new server starts at {spec.url}"
            )
            tail.append(line)
            with open(log, "a") as handle:
                handle.write(f"{line}\n")
            threading.Thread(target=self._roll_out, args=(service, spec), daemon=True).start()
            return 0
        what = f"GET {spec.ready_path}" if spec.ready_path else "a connection"
        deadline = time.monotonic() + (spec.deadline_s or DEFAULT_READY_S)
        while not closed and not stopping.is_set():
            code = process.poll()
            if code is not None:
                self._stop(service)
                tail.extend(_last_lines(log))
                raise ServiceFailed(
                    f"InferenceService {spec.name}: the server exited with code {code} before "
                    f"{what} on {spec.url} answered",
                    code,
                )
            if _ready(spec.url, spec.ready_path):
                service.state = "Ready"
                tail.append(f"InferenceService {spec.name} ready at {spec.url}")
                return 0
            if time.monotonic() > deadline:
                self._stop(service)
                tail.extend(_last_lines(log))
                raise ServiceFailed(
                    f"InferenceService {spec.name}: not ready after {spec.deadline_s:g} s "
                    f"({what} on {spec.url} never answered 200); stopped"
                )
            stopping.wait(POLL_S)
        self._stop(service)
        return -signal.SIGTERM

    def _roll_out(self, service: Service, spec: ServiceSpec) -> None:
        """A re-applied service's new process, watched until it answers (Ready), exits, or
        is stopped; each outcome a line in its log."""
        while service.state == "Starting":
            if service.process.poll() is not None:
                line = f"exited with code {service.process.returncode} before it was ready"
                break
            if _ready(spec.url, spec.ready_path):
                with self._lock:
                    if service.state == "Starting":
                        service.state = "Ready"
                line = f"ready at {spec.url}"
                break
            time.sleep(POLL_S)
        else:
            return
        with contextlib.suppress(OSError), open(service.log, "a") as handle:
            handle.write(f"--- InferenceService {service.name} {line}\n")

    def delete(self, name: str) -> str:
        """Stop the service ``name`` if this run started it; what happened, one line."""
        with self._lock:
            service = self._services.get(name)
        if service is None or service.state == "Stopped":
            return f"InferenceService {name}: nothing to delete (none of that name runs)"
        self._stop(service)
        return f"InferenceService {name}: stopped its process ({service.url}, task {service.task})"

    def stop_all(self) -> None:
        """Stop every service (the run's end), signals held off until all are gone."""
        with self._lock:
            self._closed = True
            services = [s for s in self._services.values() if s.state != "Stopped"]
        with _signals_held():
            for service in services:
                self._stop(service)

    def _stop(self, service: Service) -> None:
        """Its process group and every descendant; a line in its own task's log."""
        if service.state == "Stopped":
            return
        SubprocessHandler._kill(service.process)  # its group, then every descendant seen
        service.state = "Stopped"
        with open(service.log, "a") as handle:
            code = service.process.returncode
            handle.write(f"--- InferenceService {service.name} stopped (exit code {code})\n")


def _ready(url: str, path: str | None) -> bool:
    if path is None:
        port = int(url.rsplit(":", 1)[1])
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return True
        return False
    try:
        with urllib.request.urlopen(url + path, timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _last_lines(log: Path, count: int = 20) -> list[str]:
    with contextlib.suppress(OSError):
        return log.read_text(errors="replace").splitlines()[-count:]
    return []


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Block the stop signals in this thread while the services stop (a signal then would
    leave one running); they are delivered after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
