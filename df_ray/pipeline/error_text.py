"""One line that names an exception, for a progress line, a report entry or a CLI message.

Ray and the engines raise errors whose text runs to a traceback of the remote process; a
run's summary, the fault table and the serving status show only its first line, cut to a
length, and fall back to the exception's type when the text is empty.
"""

from __future__ import annotations


def first_line(e: BaseException, *, limit: int = 300, typed: bool = False) -> str:
    """The first non-empty line of ``str(e)``, at most ``limit`` characters.

    ``typed`` prefixes the exception's type (``"TimeoutError: ..."``); an exception without
    text is always named by its type.
    """
    lines = str(e).strip().splitlines()
    text = lines[0].strip()[:limit] if lines else ""
    if not text:
        return type(e).__name__
    return f"{type(e).__name__}: {text}" if typed else text


def last_line(e: BaseException, *, limit: int = 300) -> str:
    """The last line of ``str(e)``, at most ``limit`` characters: a Ray task error's cause,
    below the remote traceback; the exception's type when it has no text."""
    text = str(e).strip()
    return text.splitlines()[-1][:limit] if text else type(e).__name__
