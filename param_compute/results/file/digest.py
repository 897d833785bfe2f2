"""The identity of a results file: the hash of its bytes (for tools that take a file once)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from param_compute.results.file.reading import PathLike, open_results

_BLOCK = 1 << 20


def file_digest(path: PathLike) -> str:
    """The SHA-256 of a results file's bytes, read in blocks; only a regular file is opened
    (:class:`ResultsFileError` otherwise, as every reader here)."""
    digest = hashlib.sha256()
    with open_results(Path(path)) as stream:
        while True:
            block = stream.read(_BLOCK)
            if not block:
                return digest.hexdigest()
            digest.update(block)
