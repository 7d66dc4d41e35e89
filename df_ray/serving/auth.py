"""The bearer token of the service's HTTP route, and the checks of a request's sampling fields.

``df-ray serve`` protects ``POST <route>/v1/chat/completions`` and ``GET <route>/v1/models``
of df_ray's :class:`~df_ray.serving.deployment.EngineServer` with one token per deployment:

1. ``DF_RAY_SERVE_TOKEN`` (the token itself), else
2. ``--token-file FILE`` or ``DF_RAY_SERVE_TOKEN_FILE`` (a secret file: the token on its first
   line; refused when others than its owner may read it), else
3. a new random token (256 bits), written to ``~/.config/df_ray/serve-token`` (mode 0600,
   replaced on each deployment) and named on the command's output.

A replica holds only the token's SHA-256, never the token (Serve shows a deployment's
arguments to anyone who can read its config). A request without ``Authorization: Bearer
<token>`` is answered 401, with another token 403, before anything reaches the engine. Jobs
call the service through Serve's DeploymentHandles, inside the cluster, not over HTTP: they
need no token (anyone who can join the Ray cluster can call its deployments).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import secrets
import stat
from pathlib import Path

TOKEN_ENV = "DF_RAY_SERVE_TOKEN"
TOKEN_FILE_ENV = "DF_RAY_SERVE_TOKEN_FILE"
#: Where a generated token is written.
DEFAULT_TOKEN_FILE = Path("~/.config/df_ray/serve-token")
#: The most tokens an HTTP request may ask for (a backbone's ``max_model_len``, when smaller,
#: is its engine's own bound).
MAX_TOKENS_CAP = 8192
MAX_MESSAGES = 256
MAX_STOPS = 16
ROLES = ("system", "user", "assistant")


class TokenError(ValueError):
    """A token that cannot be had (an unreadable or shared secret file); one line."""


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def resolve_token(token_file: str | None = None,
                  write_to: Path | None = None) -> tuple[str, str]:
    """(token, where it came from): the environment, the secret file, or a new one written
    to ``write_to`` (default ``DEFAULT_TOKEN_FILE``) with mode 0600."""
    env = os.environ.get(TOKEN_ENV, "").strip()
    if env:
        return env, f"${TOKEN_ENV}"
    path = token_file or os.environ.get(TOKEN_FILE_ENV, "").strip() or None
    if path:
        p = Path(path).expanduser()
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as e:
            raise TokenError(f"token file {p}: {os.strerror(e.errno or 0)}") from None
        with os.fdopen(fd) as f:
            mode = os.fstat(f.fileno()).st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise TokenError(f"token file {p} may be read by others (mode "
                                 f"{stat.S_IMODE(mode):o}): chmod 600 it")
            token = f.readline().strip()
        if len(token) < 16:
            raise TokenError(f"token file {p}: its first line must hold a token of at least "
                             "16 characters")
        return token, str(p)
    token = secrets.token_urlsafe(32)
    dest = (write_to or DEFAULT_TOKEN_FILE).expanduser()
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.replace(tmp, dest)
    return token, str(dest)


def authorized(header: str | None, digest: str | None) -> int | None:
    """None when the ``Authorization`` header carries the token whose SHA-256 is ``digest``,
    else the HTTP status to answer: 401 (no bearer token), 403 (another token). A server
    without a digest refuses every request (403)."""
    if not header or not header.startswith("Bearer ") or not header[7:].strip():
        return 401
    if not digest:
        return 403
    return None if hmac.compare_digest(token_digest(header[7:].strip()), digest) else 403


class FieldError(ValueError):
    """A request field out of range; ``field`` names it."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field


def _number(body: dict, name: str, default: float, lo: float, hi: float,
            lo_open: bool = False) -> float:
    v = body.get(name, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise FieldError(name, f"must be a number, got {type(v).__name__}")
    v = float(v)
    if not math.isfinite(v) or v > hi or v < lo or (lo_open and v == lo):
        rng = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
        raise FieldError(name, f"must be a finite number in {rng}, got {v}")
    return v


def _integer(body: dict, name: str, default: int, lo: int, hi: int) -> int:
    v = body.get(name, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, int):
        raise FieldError(name, f"must be an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise FieldError(name, f"must be in [{lo}, {hi}], got {v}")
    return v


def sampling_fields(body: dict, max_tokens_cap: int = MAX_TOKENS_CAP) -> dict:
    """The validated sampling fields of an OpenAI chat body: ``temperature`` in [0, 2],
    ``top_p`` in (0, 1], ``max_tokens`` in [1, cap], ``seed`` a non-negative 63-bit integer,
    ``stop`` a string or up to ``MAX_STOPS`` strings, ``ignore_eos`` a bool; a
    :class:`FieldError` naming the first bad field."""
    if not isinstance(body, dict):
        raise FieldError("body", "must be a JSON object")
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, list | tuple) or len(stop) > MAX_STOPS or not all(
            isinstance(s, str) for s in stop):
        raise FieldError("stop", f"must be a string or a list of at most {MAX_STOPS} strings")
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise FieldError("ignore_eos", "must be true or false")
    return {"temperature": _number(body, "temperature", 0.7, 0.0, 2.0),
            "top_p": _number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
            "max_tokens": _integer(body, "max_tokens", 512, 1, max_tokens_cap),
            "seed": _integer(body, "seed", 0, 0, 2**63 - 1),
            "stop": tuple(stop), "ignore_eos": ignore_eos}


def messages(body: dict) -> list[tuple[str, str]]:
    """The validated ``messages`` (role, content) of an OpenAI chat body."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs or len(msgs) > MAX_MESSAGES:
        raise FieldError("messages", f"must be a non-empty list of at most {MAX_MESSAGES}")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(
                m.get("content"), str):
            raise FieldError(f"messages[{i}]", f"must be {{role: one of {', '.join(ROLES)}, "
                                               "content: a string}")
        out.append((m["role"], m["content"]))
    return out
