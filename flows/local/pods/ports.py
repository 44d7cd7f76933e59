"""A free TCP port on 127.0.0.1: a job's rendezvous (``PET_MASTER_PORT``) and an
InferenceService's address, where a pod would have its own network."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
