"""What one local run holds while it runs, passed explicitly to the functions that run its
nodes (``flows.local.nodes``) and to its pods (``flows.local.pods.pod``), as KFP's local
orchestrator passes its run state (kubeflow/pipelines sdk/python/kfp/local/orchestrator/
dag_orchestrator.py): every node's record (``tasks``), the globals, the lock over them,
the stop and deadline events, the memo cache, the nodes a resumed run keeps; and
``state.json``, the records on disk from which ``resume`` continues a run. It imports
neither ``nodes`` nor ``pods``: they read it.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import psutil

from flows.local.memo_cache import MemoCache
from flows.local.signals import STOP_MESSAGE
from flows.local.status import TaskRecord, TaskState


@dataclass
class RunState:
    """One run's shared state; nodes run on their own threads and change it under ``lock``."""

    name: str
    manifest: dict[str, Any]
    run_dir: Path
    templates: dict[str, dict[str, Any]]
    memo: MemoCache
    cwd: Path
    on_change: Callable[[], None]  # nodes started or finished: state.json and the view follow
    globals: dict[str, str] = field(default_factory=dict)
    tasks: dict[str, TaskRecord] = field(default_factory=dict)  # every node by its key
    exit_task: TaskRecord | None = None
    root: TaskRecord | None = None  # the entrypoint's node (not among tasks for a DAG/steps)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)  # start nothing more
    deadline_passed: threading.Event = field(default_factory=threading.Event)
    kept: set[str] = field(default_factory=set)  # nodes a resumed run keeps from the earlier one
    _manifest_json: str | None = None

    # --- nodes -----------------------------------------------------------------------------
    def node(self, key: str, template: str, kind: str = "Pod") -> TaskRecord:
        """The record of node ``key``, made Pending the first time it is asked for."""
        with self.lock:
            record = self.tasks.get(key)
            if record is None:
                record = self.tasks[key] = TaskRecord(key, template, kind=kind)
            return record

    def settle(
        self, key: str, template: str, state: TaskState, message: str, kind: str
    ) -> TaskRecord:
        """A node that runs nothing: Omitted, Skipped or Error."""
        record = self.node(key, template, kind)
        record.state, record.message, record.kind = state, message, kind
        record.finished = time.time()
        return record

    def stopped_message(self) -> str:
        return "Step exceeded its deadline" if self.deadline_passed.is_set() else STOP_MESSAGE

    # --- state on disk -------------------------------------------------------------------
    def save(self, services: dict[str, Any]) -> None:
        """Write ``state.json`` (atomically: a new file moved over the old); ``services``:
        the run's InferenceServices as they stand."""
        with self.lock:  # nodes finish on their own threads
            self.run_dir.mkdir(parents=True, exist_ok=True)
            records = {n: saved(t) for n, t in list(self.tasks.items())}
            state = {
                "name": self.name,
                "globals": dict(self.globals),
                "tasks": records,
                "exit_handler": saved(self.exit_task) if self.exit_task else None,
                "root": saved(self.root) if self.root else None,
                "services": services,
                # who writes it, so that a review can tell a run whose runner was killed
                # (SIGKILL, a lost machine) from one still going (flows/local/review/)
                "runner": runner_identity(),
                "saved": time.time(),
            }
            # the manifest never changes: encoded once, it leads the state as if dumped with it
            if self._manifest_json is None:
                self._manifest_json = json.dumps(self.manifest, indent=2, default=str)
            text = json.dumps(state, indent=2, default=str)
            manifest = self._manifest_json.replace("\n", "\n  ")
            tmp = self.run_dir / "state.json.tmp"
            tmp.write_text(f'{{\n  "manifest": {manifest},\n{text[2:]}')
            tmp.replace(self.run_dir / "state.json")


@functools.cache
def runner_identity() -> dict[str, Any]:
    """This process as state.json names its runner: the host, the pid and the pid's start
    (a pid taken again by another process later starts later); read once, not per save."""
    me = psutil.Process()
    return {"host": socket.gethostname(), "pid": os.getpid(), "created": me.create_time()}


_SAVED_FIELDS = [f.name for f in fields(TaskRecord) if f.name != "tail"]


def saved(record: TaskRecord) -> dict[str, Any]:
    """A record as state.json keeps it: its fields but the log tail (``asdict`` without
    its deep copies, a cost paid on every save); its outputs and children copied, as a
    node's thread may add to them while the state is written."""
    kept = {name: getattr(record, name) for name in _SAVED_FIELDS}
    kept["outputs"] = dict(record.outputs)
    kept["children"] = list(record.children)
    return kept
