"""Script templates as local processes.

Argo writes a script template's ``source`` to ``/argo/staging/script`` (mode 0755) and runs
its container with that path appended to the args (workflow/controller/operator.go
``executeScript``, workflow/executor ``StageFiles``): ``[python]`` runs
``python /argo/staging/script``, ``[sh, -c]`` runs the file as a command. Locally the file is
written to the task's directory and run with this interpreter for ``python`` and as is for
``sh`` and ``bash``; another interpreter lives only in its image and is refused. Paths in
the source that name a declared output are moved to the task's directory, as in the args.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from flows.local.errors import UnsupportedFeature
from flows.local.pods.container import container_process
from flows.local.pods.output_paths import OutputPaths
from flows.local.pods.processes import ProcessSpec

LOCAL_INTERPRETERS = re.compile(r"python(3(\.\d+)?)?|sh|bash")


def script_interpreter_problem(where: str, script: Mapping[str, Any]) -> str | None:
    """Why a script template cannot run here, or None."""
    command = script.get("command") or []
    if not command:
        return f"{where}: script has no command (the image's interpreter is not known here)"
    if not LOCAL_INTERPRETERS.fullmatch(PurePosixPath(str(command[0])).name):
        return f"{where}: script command {command[0]!r} (only python, sh and bash run locally)"
    return None


def script_process(
    template: Mapping[str, Any], task_dir: Path, cwd: Path, base_env: Mapping[str, str]
) -> ProcessSpec:
    script = dict(template["script"])
    problem = script_interpreter_problem(f"template {template.get('name')}", script)
    if problem:
        raise UnsupportedFeature(problem)
    source = task_dir / "script"
    # the source names the declared outputs as the command would (echo 1 > /tmp/n)
    source.write_text(OutputPaths.of(template, task_dir).rewrite(script.pop("source", "")))
    source.chmod(0o755)
    script["args"] = [*script.get("args", []), str(source)]
    return container_process({**template, "container": script}, task_dir, cwd, base_env)
