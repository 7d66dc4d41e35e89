"""Operating-system faults that name their file.

pyarrow raises ``OSError(errno, "Error writing bytes to file. Detail: [errno 28] ...")``
without a file name, so a full disk under a Parquet write would be reported without saying
where. :func:`naming` gives such an error the path being written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def naming(path: str | os.PathLike[str]) -> Iterator[None]:
    """Re-raise an ``OSError`` that names no file as one that names ``path`` (errno kept)."""
    try:
        yield
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, os.strerror(e.errno), str(path)) from e
