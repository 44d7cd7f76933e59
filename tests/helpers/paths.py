"""Where the tests find the checkout and ../shared (the design documents, the validator,
the vendored cluster files)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = REPO_ROOT.parent / "shared"
