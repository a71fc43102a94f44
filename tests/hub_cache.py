"""Lay files out as huggingface_hub's cache holds them, so hub ids resolve offline in tests.

The real format: ``<hub>/models--ORG--NAME/refs/main`` holds a 40-hex commit,
``snapshots/<commit>/<file>`` is a relative link to ``blobs/<etag>``.  Here each blob is itself a
link to the packaged file, so no model is copied.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["add_repo"]


def add_repo(hub: Path, repo: str, files: Mapping[str, Path]) -> Path:
    """Cache ``files`` (name in the repository -> file on disk) as ``repo`` at ``refs/main`` under
    ``hub`` (``$HF_HOME/hub``); returns the snapshot folder."""
    root = hub / f"models--{repo.replace('/', '--')}"
    commit = hashlib.sha1(repo.encode()).hexdigest()
    snapshot = root / "snapshots" / commit
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    for name, source in files.items():
        blob = root / "blobs" / hashlib.sha256(f"{repo}/{name}".encode()).hexdigest()
        if not blob.exists():
            blob.symlink_to(source.resolve())
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot
