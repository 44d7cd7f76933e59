"""Where a pod template's declared output paths are on this machine, and which paths in its
command, args, env and script source name them.

In a pod every path exists as written, and after the main container exits Argo's executor
reads back the paths the template declares (output parameters' ``valueFrom.path``, output
artifacts' ``path``). Here a task's process shares this machine's filesystem with every
other, so each declared path gets a place in the task's directory, the container path
under ``tasks/<task>/outputs/`` (``/tmp/output.txt`` is ``tasks/<task>/outputs/tmp/output.txt``),
and exactly the paths that name one are rewritten:

- a declared path itself, or a path inside it (an artifact that is a directory);
- a directory that holds declared paths, named whole (``--outputs-dir /tmp/outputs``, or
  ``cd /tmp``): the process builds the declared paths in it at run time; what else it
  writes there lands in the task's directory too, as it would stay in the pod.

Anything else is left as written: a longer path that starts with the same characters
(``/tmp/outputs-x``, ``/tmp/output.txt.bak``), another file in the same directory
(``/tmp/x/main/argosay.py`` next to ``/tmp/output.txt``), this machine's own environment
(``PATH``, ``TMPDIR``). A path ends where a character no path here holds begins: space,
quote, ``:``, ``;``, ``=``, ``,``, brackets, redirections. A declared path the process
builds from pieces that name neither it nor its directory whole is written where it says,
not redirected; its output is then reported missing, saying so (``missing_output``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

END = r"""\s'"`;:,|&<>(){}\[\]="""  # a character that ends a path inside a longer string
# a path where a word may start (after a start or an END character), alone or in a file:// URI
PATH_IN_TEXT = re.compile(rf"(?<![^{END}])(file://)?(/[^{END}]*)")


def declared_paths(template: Mapping[str, Any]) -> list[str]:
    """The paths a pod template's outputs are read from, as the template writes them."""
    outputs = template.get("outputs", {})
    paths = [
        p["valueFrom"]["path"]
        for p in outputs.get("parameters", [])
        if "path" in p.get("valueFrom", {})
    ]
    return paths + [a["path"] for a in outputs.get("artifacts", []) if "path" in a]


@dataclass(frozen=True)
class OutputPaths:
    """A task's declared output paths (absolute, normalised) and the local root they move to."""

    declared: frozenset[str]
    root: Path

    @classmethod
    def of(cls, template: Mapping[str, Any], task_dir: Path) -> OutputPaths:
        absolute = {posixpath.normpath(p) for p in declared_paths(template) if p.startswith("/")}
        return cls(frozenset(absolute), task_dir / "outputs")

    def redirected(self, path: str) -> bool:
        """Whether ``path`` (absolute, normalised) names a declared path, a path inside one,
        or a directory (other than ``/``) holding one."""
        if path in self.declared or any(path.startswith(d + "/") for d in self.declared):
            return True
        return path != "/" and any(d.startswith(path + "/") for d in self.declared)

    def local(self, path: str) -> Path:
        """Where ``path`` (absolute) is for the task's process: under the task's root if it
        is redirected, else where it says."""
        norm = posixpath.normpath(path)
        return Path(f"{self.root}{norm}") if self.redirected(norm) else Path(path)

    def rewrite(self, text: str) -> str:
        """``text`` with every path that names a declared output moved under the root."""
        if not self.declared:
            return text
        whole = text.rstrip("/")
        if whole.startswith("/") and whole == posixpath.normpath(whole) and self.redirected(whole):
            return f"{self.root}{text}"  # an argument that is one path, spaces and all

        def move(match: re.Match[str]) -> str:
            uri, path = match.group(1) or "", match.group(2)
            bare = path.rstrip("/")
            # compare as written: /tmp/./out is not rewritten; neither is a // prefix
            if bare and bare == posixpath.normpath(bare) and self.redirected(bare):
                return f"{uri}{self.root}{path}"
            return match.group(0)

        return PATH_IN_TEXT.sub(move, text)

    def path_map(self, template: Mapping[str, Any], cwd: Path) -> dict[str, Path]:
        """Each declared path as the template writes it -> where its output is read here (a
        relative one is relative to the process's working directory, as a container's is
        to its ``workingDir``)."""
        return {
            p: self.local(p) if p.startswith("/") else cwd / p for p in declared_paths(template)
        }


def missing_output(what: str, path: str, local: Path) -> str:
    """Why an output the template declares is not there."""
    if Path(path) == local:
        return f"{what}: {path} was not written"
    return (
        f"{what}: {path} was not written (here: {local}); a local run redirects a declared "
        "path only where the command, args, env or script name it or its directory whole, "
        "not one the process builds from other pieces"
    )
