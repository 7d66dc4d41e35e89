"""Temporary files named by their writer, and when one is abandoned.

The generation cache's parts and a configuration's ``samples.parquet`` are written to a
temporary file, then renamed. The temporary name carries the writer (``<host>~<pid>``) so the
next writer can tell an abandoned file from one still being written: on this machine, one
whose process has exited; from another machine (it cannot be asked), one older than
`STALE_TMP_S`.
"""

from __future__ import annotations

import os
import socket

#: A temporary file of a writer on another machine counts as abandoned after this (seconds).
STALE_TMP_S = 24 * 3600.0


def writer_tag() -> str:
    """This process as a writer: ``<host>~<pid>`` (the host name file-name-safe)."""
    host = "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:40] or "host"
    return f"{host}~{os.getpid()}"


def is_abandoned(tag: str, mtime_s: float | None, now: float) -> bool:
    """Whether a temporary file written by ``tag`` (``<host>~<pid>``, or anything else for
    an unnamed one), last modified at ``mtime_s``, belongs to a writer that is gone."""
    host, sep, pid = tag.partition("~")
    if sep and host == writer_tag().partition("~")[0] and pid.isdigit():
        return not pid_alive(int(pid))
    age = now - mtime_s if mtime_s is not None else float("inf")
    return age > STALE_TMP_S


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
