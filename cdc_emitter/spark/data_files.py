"""The data files Spark reads in a local directory, found as Spark finds them (pure)."""

from __future__ import annotations

import os
from collections.abc import Iterator

__all__ = ["data_files"]


def _hidden(name: str) -> bool:
    """Spark's rule for files it does not read in a directory (``_SUCCESS``, ``.x.crc``, ...);
    a partition directory ``_k=v`` is read."""
    return (
        name.startswith(".")
        or name.startswith("_")
        and "=" not in name
        or name.endswith(("._COPYING_", ".crc"))
    )


def data_files(directory: str) -> Iterator[str]:
    """The files Spark reads in ``directory`` (and its partition directories), in name order.

    Args:
        directory: A local directory.

    Yields:
        Each data file's path, depth first; files and directories whose names start with ``.``
        or ``_`` (``_SUCCESS``, ``_delta_log``, ``.part-0.crc``) and ``.crc`` files left out.
    """
    return _walk(directory, _MAX_DEPTH)


#: How deep `data_files` looks (partition directories nest a few levels; links may loop).
_MAX_DEPTH = 32


def _walk(directory: str, depth: int) -> Iterator[str]:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if _hidden(entry.name):
            continue
        try:
            if entry.is_dir():
                if depth > 0:
                    yield from _walk(entry.path, depth - 1)
            elif entry.is_file():
                yield entry.path
        except OSError:
            continue
