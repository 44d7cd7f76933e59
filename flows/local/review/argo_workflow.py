"""A local run's ``state.json`` as Argo's Workflow object: what ``argo get -o json`` prints
of a cluster run. Its ``status``: the phase (Running until the exit handler ended, then
``{{workflow.status}}``), startedAt, finishedAt, progress, message (operator.go's), the
workflow's output parameters and ``nodes`` (``node_tree``); its metadata with Argo's
phase and completed labels; its spec, the manifest the run ran.
"""

from __future__ import annotations

import socket
from datetime import datetime
from typing import Any

import psutil

from flows.local.review.node_tree import EXIT_KEY, FAILED, NodeTree, node_id, rfc3339
from flows.local.status import TaskState


def workflow_status(state: dict[str, Any]) -> dict[str, Any]:
    """The run as Argo's Workflow (apiVersion, kind, metadata, spec, status)."""
    manifest = state["manifest"]
    spec = manifest.get("spec", {})
    name = state["name"]
    templates = {t["name"]: t for t in spec.get("templates", [])}
    records = dict(state.get("tasks", {}))
    tree = NodeTree(name, templates, records)
    root = records.get(name) or state.get("root") or _root_record(state, spec, templates)
    entry = templates.get(spec.get("entrypoint", ""), {})
    if root.get("name", "") == "":  # a DAG or steps entrypoint: its kind before it runs
        root = {**root, "kind": "DAG" if "dag" in entry else "Steps"}
    tree.visit(root.get("name", "") and name, root, "")
    exit_record = state.get("exit_handler")
    if exit_record and (exit_record.get("started") or exit_record["state"] != "Pending"):
        tree.visit(EXIT_KEY, exit_record, "")
    values = state.get("globals", {})
    phase, finished = run_phase(state, tree.nodes)
    gone = runner_gone(state) if phase == "Running" else None
    if gone:  # as Argo's controller errs the nodes of pods that vanished
        phase, finished = "Failed", rfc3339(state["saved"]) if state.get("saved") else None
        for node in tree.nodes.values():
            if node["phase"] in ("Running", "Pending"):
                node["phase"], node["message"] = "Error", gone
    started = [n["startedAt"] for n in tree.nodes.values() if n.get("startedAt")]
    root_node = tree.nodes[name]
    status: dict[str, Any] = {
        "phase": phase,
        "startedAt": root_node.get("startedAt") or (min(started) if started else None),
        "finishedAt": finished,
        "progress": progress(tree.nodes),
        "message": run_message(phase, root_node, tree.nodes.get(node_id(name, f"{name}.onExit"))),
        "nodes": tree.nodes,
    }
    prefix = "workflow.outputs.parameters."
    outputs = [
        {"name": k[len(prefix) :], "value": v} for k, v in values.items() if k.startswith(prefix)
    ]
    if outputs:
        status["outputs"] = {"parameters": outputs}
    completed = phase in ("Succeeded", "Failed", "Error")
    metadata = {
        "name": name,
        "namespace": values.get("workflow.namespace", "local"),
        "uid": values.get("workflow.uid", ""),
        "creationTimestamp": created(values) or status["startedAt"],
        "labels": {
            **(manifest.get("metadata", {}).get("labels") or {}),
            "workflows.argoproj.io/phase": phase,
            "workflows.argoproj.io/completed": "true" if completed else "false",
        },
    }
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": metadata,
        "spec": spec,
        "status": {k: v for k, v in status.items() if v not in (None, "")},
    }


def runner_gone(state: dict[str, Any]) -> str | None:
    """Why a run that says Running is not: its runner (``state.json``'s ``runner``, on this
    host) is no longer the process that wrote it, killed before it could record an end.
    None while it runs, for a state of before this field, or of another host's runner."""
    runner = state.get("runner")
    if not runner or runner.get("host") != socket.gethostname():
        return None
    pid = runner["pid"]
    try:
        process = psutil.Process(pid)
        alive = abs(process.create_time() - runner["created"]) < 1.0
        alive = alive and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        alive = False
    except psutil.Error:  # there, but not ours to read: it may be the runner
        alive = True
    if alive:
        return None
    return (
        f"the local runner (pid {pid}) ended before the run did; "
        "python flows/cifar.py --resume <its run directory> continues it"
    )


def created(values: dict[str, str]) -> str | None:
    """{{workflow.creationTimestamp}} (ISO 8601) as metav1.Time writes it."""
    text = values.get("workflow.creationTimestamp")
    if not text:
        return None
    return rfc3339(datetime.fromisoformat(text).timestamp())


def _root_record(state: dict[str, Any], spec: dict, templates: dict) -> dict[str, Any]:
    """The entrypoint's node of a run whose state.json predates its record: phase and
    times from the nodes under it."""
    entry = templates.get(spec.get("entrypoint", ""), {})
    records = list(state.get("tasks", {}).values())
    top = [r for r in records if not r["name"].startswith(EXIT_KEY)]
    status = state.get("globals", {}).get("workflow.status", "Running")
    started = [r["started"] for r in top if r.get("started")]
    finished = [r["finished"] for r in top if r.get("finished")]
    done = status != "Running"
    return {
        "name": "", "template": spec.get("entrypoint", ""),
        "kind": "DAG" if "dag" in entry else "Steps",
        "state": status if done else "Running",
        "started": min(started) if started else None,
        "finished": max(finished) if done and finished else None,
    }  # fmt: skip


def run_phase(state: dict[str, Any], nodes: dict[str, dict]) -> tuple[str, str | None]:
    """The workflow's phase and finish: Running until the entrypoint and the exit handler
    ended (Argo completes a workflow after its exit handler), then workflow.status."""
    status = state.get("globals", {}).get("workflow.status", "Running")
    exit_record = state.get("exit_handler")
    exit_done = exit_record is None or TaskState(exit_record["state"]).done
    if status == "Running" or not exit_done:
        return "Running", None
    finished = [n["finishedAt"] for n in nodes.values() if n.get("finishedAt")]
    return status, max(finished) if finished else None


def run_message(phase: str, root: dict[str, Any], exit_node: dict[str, Any] | None) -> str:
    """operator.go: a failed exit handler's message when the rest succeeded, else the
    entrypoint's message on a failure."""
    if phase not in FAILED:
        return ""
    if root["phase"] == "Succeeded" and exit_node and exit_node["phase"] in FAILED:
        return exit_node.get("message", "")
    return root.get("message", "")


def progress(nodes: dict[str, dict[str, Any]]) -> str:
    """workflow/progress/updater.go: pods done (Succeeded, Skipped, Omitted) of all pods."""
    pods = [n for n in nodes.values() if n["type"] == "Pod"]
    done = [n for n in pods if n["phase"] in ("Succeeded", "Skipped", "Omitted")]
    return f"{len(done)}/{len(pods)}"
