"""Before a local run downloads CIFAR-10: whether this machine can reach the source at all.

Offline, the run would start, create its MLflow run, fail at staging and run its exit
handler: half a minute to learn what one look-up tells. A host that does not resolve or
refuses the connection is refused here in one line, before anything starts, with the two
ways forward; anything less certain (a timeout, a proxy in the way) is left to the step,
which retries what may pass. Only for a local run: a cluster's pods have their own network.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
import urllib.request
from pathlib import Path

from flows.cli.hints import program, shown
from flows.errors import FlowError
from steps.common.config import REPO_ROOT, PipelineConfig

CONNECT_TIMEOUT_S = 3.0
TARBALL = "cifar-10-python.tar.gz"


def cached_tarball() -> Path:
    """Where the staging step keeps its download (steps/stage_data/stage.py ``_cache_dir``;
    flows may not import a step)."""
    root = os.environ.get("CIFAR_CACHE_DIR") or Path.home() / ".cache" / "cifar-pipeline"
    return Path(root) / TARBALL


def why_unreachable(url: str) -> str | None:
    """``does not resolve`` or ``refused the connection`` (with the system's words) for a
    host no retry will reach, else None (reached, or not certain)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname
    if not host or parts.scheme not in ("http", "https"):
        return None
    if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(host):
        return None  # the proxy resolves and connects, not this machine
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except socket.gaierror as exc:
        return f"{host} does not resolve ({exc.strerror or exc})"
    except ConnectionRefusedError as exc:
        return f"{host}:{port} refused the connection ({exc.strerror or exc})"
    except OSError:
        return None  # a timeout or an unreachable route may pass: the step retries
    return None


def check_download(cfg: PipelineConfig) -> None:
    """FlowError (one line, exit 2) when ``data.source: cifar10`` must download and cannot."""
    if cfg.data.source != "cifar10" or cached_tarball().is_file():
        return
    why = why_unreachable(cfg.data.url)
    if why is None:
        return
    smoke = shown(REPO_ROOT / "configs" / "smoke.yaml")
    raise FlowError(
        f"data.source cifar10 downloads {cfg.data.url}, but {why}: no network? Run on "
        f"synthetic data instead ({program()} --config {smoke}, about a minute) or give a "
        f"copy of the tarball (--set data.source=PATH/{TARBALL})"
    )
