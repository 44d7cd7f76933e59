"""The local runner on small hand-built Hera workflows: real subprocesses, real torchrun."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from hera.workflows import DAG, Container, Parameter, Resource, Workflow
from hera.workflows import models as m

from flows.local.checks.fields import unsupported
from flows.local.errors import UnsupportedFeature
from flows.local.status import TaskState
from flows.local.substitution import substitute
from flows.local.workflow import LocalRunner
from tests.helpers.paths import REPO_ROOT

OUT = m.ValueFrom(path="/tmp/outputs/value")


def shell(name: str, script: str, **kwargs) -> Container:
    """A container template running a shell script; parameters appear as $1... via args."""
    return Container(name=name, image="busybox:1.36", command=["sh", "-c", script], **kwargs)


def run(workflow: Workflow, tmp_path: Path, **kwargs) -> LocalRunner:
    runner = LocalRunner(
        workflow.to_dict(),
        tmp_path / "runs",
        cache_dir=tmp_path / "cache",
        sleep=lambda s: None,
        **kwargs,
    )
    runner.result = runner.run()
    return runner


def test_parameters_flow_through_tasks_globals_and_exit_handler(tmp_path: Path) -> None:
    exit_file = tmp_path / "exit.txt"
    with Workflow(
        generate_name="demo-",
        entrypoint="main",
        on_exit="finally",
        arguments=[Parameter(name="greeting", value="hi")],
    ) as w:
        echo = shell(
            "echo",
            "mkdir -p /tmp/outputs && "
            "printf '%s-%s' '{{inputs.parameters.text}}' '{{workflow.name}}' > /tmp/outputs/value",
            inputs=[Parameter(name="text")],
            outputs=[Parameter(name="value", value_from=OUT, global_name="last")],
        )
        shell(
            "finally",
            "echo '{{workflow.status}} {{workflow.outputs.parameters.last}}' > " + str(exit_file),
        )
        with DAG(name="main"):
            first = echo(name="first", arguments={"text": "{{workflow.parameters.greeting}}"})
            second = echo(name="second", arguments={"text": first.get_parameter("value")})
            first >> second
    runner = run(w, tmp_path)
    name = runner.name
    assert name.startswith("demo-")
    assert runner.result.status == "Succeeded"
    assert runner.tasks["first"].outputs == {"value": f"hi-{name}"}
    assert runner.tasks["second"].outputs == {"value": f"hi-{name}-{name}"}
    assert runner.tasks["second"].started >= runner.tasks["first"].finished
    assert exit_file.read_text().strip() == f"Succeeded hi-{name}-{name}"
    assert (runner.run_dir / "logs" / "first.log").is_file()
    state = json.loads((runner.run_dir / "state.json").read_text())
    assert state["tasks"]["second"]["state"] == "Succeeded"


def test_independent_tasks_run_side_by_side(tmp_path: Path) -> None:
    with Workflow(generate_name="par-", entrypoint="main") as w:
        nap = shell("nap", "sleep 1")
        with DAG(name="main"):
            root = nap(name="root")
            root >> [nap(name="left"), nap(name="right")]
    runner = run(w, tmp_path)
    left, right = runner.tasks["left"], runner.tasks["right"]
    assert runner.result.status == "Succeeded"
    assert left.started < right.finished and right.started < left.finished  # overlapped


def test_retry_strategy_retries_with_backoff_then_succeeds(tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    waits: list[float] = []
    with Workflow(generate_name="retry-", entrypoint="main") as w:
        flaky = shell(
            "flaky",
            f"if [ -f {marker} ]; then exit 0; else touch {marker}; echo transient >&2; exit 3; fi",
            retry_strategy=m.RetryStrategy(limit="3", backoff=m.Backoff(duration="2s", factor="3")),
        )
        with DAG(name="main"):
            flaky(name="flaky")
    runner = LocalRunner(w.to_dict(), tmp_path / "runs", sleep=waits.append)
    result = runner.run()
    assert result.status == "Succeeded"
    assert runner.tasks["flaky"].attempts == 2
    assert waits == [2.0]
    assert "transient" in (runner.run_dir / "logs" / "flaky.log").read_text()


def test_failure_stops_the_dag_names_the_task_and_exit_handler_sees_it(tmp_path: Path) -> None:
    exit_file = tmp_path / "status"
    with Workflow(generate_name="fail-", entrypoint="main", on_exit="finally") as w:
        bad = shell(
            "bad",
            "echo 'bad parameter: --epochs -1' >&2; exit 2",
            retry_strategy=m.RetryStrategy(limit="1"),
        )
        ok = shell("ok", "true")
        shell("finally", f"echo '{{{{workflow.status}}}}' > {exit_file}")
        with DAG(name="main"):
            bad(name="train") >> ok(name="after")
    runner = run(w, tmp_path)
    assert runner.result.status == "Failed"
    failed = runner.result.failed_task
    assert (failed.name, failed.exit_code, failed.attempts) == ("train", 2, 2)
    assert "bad parameter" in failed.tail[-1]
    assert runner.tasks["after"].state is TaskState.OMITTED
    assert exit_file.read_text().strip() == "Failed"


def test_active_deadline_kills_the_process(tmp_path: Path) -> None:
    with Workflow(generate_name="slow-", entrypoint="main") as w:
        slow = shell("slow", "sleep 30", active_deadline_seconds=1)
        with DAG(name="main"):
            slow(name="slow")
    start = time.monotonic()
    runner = run(w, tmp_path)
    assert time.monotonic() - start < 15
    assert runner.result.status == "Failed"
    assert "activeDeadlineSeconds 1 s passed" in runner.tasks["slow"].tail[-1]


def test_memoized_template_is_served_from_the_cache(tmp_path: Path) -> None:
    counter = tmp_path / "count"

    def workflow() -> Workflow:
        with Workflow(generate_name="memo-", entrypoint="main") as w:
            stage = shell(
                "stage",
                f'[ -z "$FAIL" ] || exit 5; echo x >> {counter}; mkdir -p /tmp/outputs; '
                "echo '{{inputs.parameters.src}}' > /tmp/outputs/value",
                inputs=[Parameter(name="src")],
                outputs=[Parameter(name="value", value_from=OUT)],
                memoize=m.Memoize(
                    key="stage-{{inputs.parameters.src}}",
                    max_age="1d",
                    cache=m.Cache(config_map=m.LocalObjectReference(name="memo")),
                ),
            )
            with DAG(name="main"):
                stage(name="stage", arguments={"src": "synthetic:100"})
        return w

    counter.write_text("")
    failing = run(workflow(), tmp_path, env={**os.environ, "FAIL": "1"})
    assert failing.tasks["stage"].state is TaskState.FAILED
    assert not list((tmp_path / "cache").rglob("*.json"))  # a failure is never memoized
    first, second = run(workflow(), tmp_path), run(workflow(), tmp_path)
    assert first.tasks["stage"].state is TaskState.SUCCEEDED
    assert second.tasks["stage"].state is TaskState.CACHED
    assert "memoized" in second.tasks["stage"].message
    assert second.tasks["stage"].outputs == {"value": "synthetic:100"}
    assert counter.read_text().count("x") == 1


def test_resume_reruns_from_the_failed_task_only(tmp_path: Path) -> None:
    counter, gate = tmp_path / "count", tmp_path / "gate"
    with Workflow(generate_name="resume-", entrypoint="main") as w:
        first = shell(
            "first",
            f"echo x >> {counter}; mkdir -p /tmp/outputs; echo 7 > /tmp/outputs/value",
            outputs=[Parameter(name="value", value_from=OUT)],
        )
        second = shell(
            "second",
            f"test -f {gate} && echo got-{{{{inputs.parameters.v}}}}",
            inputs=[Parameter(name="v")],
        )
        with DAG(name="main"):
            a = first(name="a")
            a >> second(name="b", arguments={"v": a.get_parameter("value")})
    failed = run(w, tmp_path)
    assert failed.result.status == "Failed" and failed.result.failed_task.name == "b"
    gate.touch()
    resumed = LocalRunner.resume(failed.run_dir, sleep=lambda s: None)
    result = resumed.run()
    assert result.status == "Succeeded"
    assert resumed.tasks["a"].message == "kept from the earlier run"
    assert counter.read_text().count("x") == 1
    assert "got-7" in (failed.run_dir / "logs" / "b.log").read_text()


def test_secret_references_come_from_the_local_environment(tmp_path: Path) -> None:
    with Workflow(generate_name="env-", entrypoint="main") as w:
        show = shell(
            "show",
            'mkdir -p /tmp/outputs; echo "$KEY:${MISSING:-unset}:$PLAIN" > /tmp/outputs/value',
            env=[
                m.EnvVar(
                    name="KEY",
                    value_from=m.EnvVarSource(
                        secret_key_ref=m.SecretKeySelector(name="s3", key="AWS_ACCESS_KEY_ID")
                    ),
                ),
                m.EnvVar(
                    name="MISSING",
                    value_from=m.EnvVarSource(
                        secret_key_ref=m.SecretKeySelector(name="s3", key="NOT_SET_ANYWHERE")
                    ),
                ),
                m.EnvVar(name="PLAIN", value="p"),
            ],
            outputs=[Parameter(name="value", value_from=OUT)],
        )
        with DAG(name="main"):
            show(name="show")
    runner = run(w, tmp_path, env={"PATH": os.environ["PATH"], "AWS_ACCESS_KEY_ID": "local-key"})
    assert runner.tasks["show"].outputs["value"] == "local-key:unset:p"


def test_pytorchjob_runs_as_a_single_node_torchrun(tmp_path: Path) -> None:
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"generateName": "train-"},
        "spec": {
            "nprocPerNode": "2",
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "image": "train:1",
                                    "command": ["torchrun", "--no-python", "sh", "-c"],
                                    "args": [
                                        'echo "$WORLD_SIZE $MASTER_ADDR {{inputs.parameters.tag}}"'
                                        f" > {tmp_path}/rank-$RANK"
                                    ],
                                }
                            ]
                        }
                    },
                }
            },
        },
    }
    with Workflow(generate_name="job-", entrypoint="main") as w:
        train = Resource(
            name="train",
            action="create",
            manifest=yaml.safe_dump(job),
            set_owner_reference=True,
            success_condition="status.replicaStatuses.Master.succeeded > 0",
            failure_condition="status.replicaStatuses.Master.failed > 0",
            inputs=[Parameter(name="tag")],
            outputs=[
                Parameter(name="job-name", value_from=m.ValueFrom(json_path="{.metadata.name}"))
            ],
        )
        with DAG(name="main"):
            train(name="train", arguments={"tag": "t1"})
    runner = run(w, tmp_path)
    assert runner.result.status == "Succeeded", list(runner.tasks["train"].tail)
    ranks = sorted(p.name for p in tmp_path.glob("rank-*"))
    assert ranks == ["rank-0", "rank-1"]
    assert (tmp_path / "rank-1").read_text().split() == ["2", "127.0.0.1", "t1"]
    assert runner.tasks["train"].outputs["job-name"].startswith("train-")


@pytest.mark.parametrize(
    ("case", "match"),
    [
        ("steps-depends", r"template loop step s: depends"),
        ("when", r"template main expression \{\{=nope\(1\)\}\}: function nope\(\) is not"),
        ("two-loops", r"task t: more than one of withItems, withParam"),
        ("expression", r"expression \{\{item\}\}"),
        ("script", r"template s: script has no command"),
        ("depends-expr", r"task t: depends 'a\.Finished': task result 'Finished'"),
        ("configmap-env", r"env X: valueFrom \['configMapKeyRef'\]"),
    ],
)
def test_unsupported_features_are_refused_by_name(case: str, match: str, tmp_path: Path) -> None:
    manifest = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "x-"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {"name": "c", "container": {"image": "i:1", "command": ["true"]}},
                {
                    "name": "main",
                    "dag": {
                        "tasks": [{"name": "a", "template": "c"}, {"name": "t", "template": "c"}]
                    },
                },
            ],
        },
    }
    templates, tasks = (
        manifest["spec"]["templates"],
        manifest["spec"]["templates"][1]["dag"]["tasks"],
    )
    if case == "steps-depends":  # a step has no depends: its group orders it
        templates.append(
            {"name": "loop", "steps": [[{"name": "s", "template": "c", "depends": "a"}]]}
        )
    elif case == "when":
        tasks[1]["when"] = "{{=nope(1)}} == 1"  # when and {{=}} run; an unknown function not
    elif case == "two-loops":
        tasks[1].update(withItems=[1, 2], withParam="[3]")
    elif case == "expression":
        templates[0]["container"]["args"] = ["{{item}}"]
    elif case == "script":
        templates.append({"name": "s", "script": {"image": "python:3", "source": "print(1)"}})
    elif case == "depends-expr":
        tasks[1]["depends"] = "a.Finished"  # depends runs; a result Argo has not
    elif case == "configmap-env":
        templates[0]["container"]["env"] = [
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}
        ]
    assert any(re.search(match, p) for p in unsupported(manifest)), unsupported(manifest)
    with pytest.raises(UnsupportedFeature, match=match):
        LocalRunner(manifest, tmp_path)


def test_substitute_refuses_unknown_names() -> None:
    assert substitute("a {{ inputs.parameters.x }} b", {"inputs.parameters.x": "1"}) == "a 1 b"
    with pytest.raises(
        UnsupportedFeature, match=r"\{\{tasks\.t\.outputs\.parameters\.y\}\} has no value"
    ):
        substitute("{{tasks.t.outputs.parameters.y}}", {})


def test_ctrl_c_stops_the_task_runs_the_exit_handler_and_leaves_a_resumable_run(
    tmp_path: Path,
) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from hera.workflows import DAG, Container, Workflow
        from flows.local.workflow import LocalRunner
        with Workflow(name="interrupted", entrypoint="main", on_exit="finally") as w:
            status = "echo {{{{workflow.status}}}} > {tmp_path}/status"
            Container(name="finally", image="i:1", command=["sh", "-c", status])
            sleep = "echo $$ > {tmp_path}/pid; sleep 60"
            slow = Container(name="slow", image="i:1", command=["sh", "-c", sleep])
            with DAG(name="main"):
                slow(name="slow")
        try:
            LocalRunner(w.to_dict(), Path("{tmp_path}/runs")).run()
        except KeyboardInterrupt:
            sys.exit(130)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT)
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 130
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert (tmp_path / "status").read_text().strip() == "Failed"  # as `argo stop` ends it
    state = json.loads((tmp_path / "runs" / "interrupted" / "state.json").read_text())
    assert state["tasks"]["slow"]["state"] == "Failed"


class BrokenHandler:
    """A task handler with a bug for one template: the runner must not die of it."""

    def __init__(self, broken: str) -> None:
        from flows.local.pods.processes import SubprocessHandler

        self.inner, self.broken = SubprocessHandler(), broken

    def run(self, spec, log, tail) -> int:
        if any(self.broken in arg for arg in spec.argv):
            raise RuntimeError("handler bug")
        return self.inner.run(spec, log, tail)

    def interrupt(self) -> None:
        self.inner.interrupt()

    def reset(self) -> None:
        self.inner.reset()

    def start_service(self, spec, sink):
        return self.inner.start_service(spec, sink)


def test_a_fault_of_the_runner_is_an_error_node_and_the_exit_handler_runs(tmp_path: Path) -> None:
    exit_file = tmp_path / "status"
    with Workflow(generate_name="fault-", entrypoint="main", on_exit="finally") as w:
        broken, ok = shell("broken", "echo BROKEN"), shell("ok", "true")
        shell("finally", f"echo '{{{{workflow.status}}}}' > {exit_file}")
        with DAG(name="main"):
            broken(name="a") >> ok(name="b")
    runner = run(w, tmp_path, handler=BrokenHandler("BROKEN"))
    assert runner.result.status == "Error"  # assessDAGPhase: an Error leaf ends the DAG Error
    record = runner.tasks["a"]
    assert record.state is TaskState.ERROR
    assert record.message == "the local runner failed on this node: RuntimeError: handler bug"
    assert runner.tasks["b"].state is TaskState.OMITTED
    assert exit_file.read_text().strip() == runner.result.status
    log = next((tmp_path / "runs").glob("*/logs/a.log")).read_text()
    assert "Traceback" in log and "handler bug" in log
