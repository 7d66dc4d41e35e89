"""What a local Ray that df_ray starts is told before Ray is imported.

Token authentication: Ray (as df_ray installs it) gives a new local cluster token
authentication unless ``RAY_AUTH_MODE`` says otherwise, and says so at warning level on
every start ("Token authentication is enabled for this Ray cluster. Set
RAY_AUTH_MODE=disabled to opt out.").
df_ray keeps that default (on a shared machine the token keeps other users' processes off
the cluster) and states it, ``RAY_AUTH_MODE=token``, which is Ray's documented way to choose
the mode and which it then respects without a warning
(https://docs.ray.io/en/latest/ray-security/token-auth.html). Ray reads the variable when it
is imported, so this runs first; a process that has imported Ray already (a notebook, a test)
or that joins a cluster (an address given, or ``RAY_ADDRESS``: the cluster's own mode
applies) is left as it is.
"""

from __future__ import annotations

import os
import sys

AUTH_MODE_ENV = "RAY_AUTH_MODE"


def token_auth_for_local_ray(address: str | None) -> bool:
    """Set ``RAY_AUTH_MODE=token`` for the local Ray this process is about to start (see the
    module docstring); whether it was set here."""
    if address or os.environ.get("RAY_ADDRESS") or "ray" in sys.modules:
        return False
    if AUTH_MODE_ENV in os.environ:
        return False
    os.environ[AUTH_MODE_ENV] = "token"
    return True
