"""The service's HTTP route: a bearer token per deployment, every sampling field checked.

The slow test deploys a scripted backbone on a real (local) Ray Serve with its HTTP proxy on
loopback and asks it from another process (a plain HTTP client): without the token, or with
another one, no completion is served and the engine generates nothing; a NaN temperature, a
negative top_p or an unbounded max_tokens is a 400 naming the field."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from df_ray.serving.auth import (
    MAX_TOKENS_CAP,
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    FieldError,
    TokenError,
    authorized,
    resolve_token,
    token_digest,
)
from df_ray.serving.deployment import openai_to_request

MSG = [{"role": "user", "content": "[S1] Which option is right?"}]


@pytest.mark.parametrize("field, value", [
    ("temperature", float("nan")), ("temperature", float("inf")), ("temperature", -0.1),
    ("temperature", 2.5), ("temperature", "hot"), ("temperature", True),
    ("top_p", -0.5), ("top_p", 0.0), ("top_p", 1.5), ("top_p", float("nan")),
    ("max_tokens", 0), ("max_tokens", -3), ("max_tokens", MAX_TOKENS_CAP + 1),
    ("max_tokens", 10**12), ("max_tokens", 1.5), ("max_tokens", False),
    ("seed", -1), ("seed", 2**64), ("stop", ["a"] * 17), ("stop", [1]), ("ignore_eos", "yes"),
])
def test_every_sampling_field_is_checked_and_named(field, value):
    with pytest.raises(FieldError) as e:
        openai_to_request({"messages": MSG, field: value}, "m")
    assert e.value.field == field and str(e.value).startswith(f"{field}: ")


def test_messages_are_checked_and_a_good_body_passes():
    for bad in ([], [{"role": "wizard", "content": "x"}], [{"role": "user", "content": 3}],
                "hi"):
        with pytest.raises(FieldError, match="messages"):
            openai_to_request({"messages": bad}, "m")
    r = openai_to_request({"messages": MSG, "temperature": 0, "top_p": 1,
                           "max_tokens": MAX_TOKENS_CAP, "seed": 7}, "m")
    assert (r.sampling.temperature, r.sampling.top_p, r.sampling.max_tokens, r.seed) == \
        (0.0, 1.0, MAX_TOKENS_CAP, 7)


def test_the_token_check():
    d = token_digest("s3cret-token-of-the-deployment")
    assert authorized("Bearer s3cret-token-of-the-deployment", d) is None
    assert authorized(None, d) == 401 and authorized("Basic abc", d) == 401
    assert authorized("Bearer ", d) == 401
    assert authorized("Bearer another-token", d) == 403
    assert authorized("Bearer s3cret-token-of-the-deployment", None) == 403


def test_the_token_comes_from_the_env_a_secret_file_or_is_generated(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    dest = tmp_path / "cfg" / "serve-token"
    token, where = resolve_token(write_to=dest)
    assert where == str(dest) and dest.read_text().strip() == token and len(token) >= 40
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o600
    again, _ = resolve_token(write_to=dest)
    assert again != token  # one per deployment
    secret = tmp_path / "secret"
    secret.write_text("a-token-from-a-secret-file\n")
    secret.chmod(0o644)
    with pytest.raises(TokenError, match="may be read by others"):
        resolve_token(str(secret))
    secret.chmod(0o600)
    assert resolve_token(str(secret)) == ("a-token-from-a-secret-file", str(secret))
    monkeypatch.setenv(TOKEN_FILE_ENV, str(secret))
    assert resolve_token()[0] == "a-token-from-a-secret-file"
    monkeypatch.setenv(TOKEN_ENV, "a-token-from-the-environment")
    assert resolve_token() == ("a-token-from-the-environment", f"${TOKEN_ENV}")


_CLIENT = """
import json, sys, urllib.error, urllib.request
url, token, body = sys.argv[1], sys.argv[2], sys.argv[3]
headers = {"Content-Type": "application/json"}
if token:
    headers["Authorization"] = "Bearer " + token
req = urllib.request.Request(url, data=body.encode() if body else None, headers=headers)
try:
    with urllib.request.urlopen(req, timeout=60) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
"""


def ask(url: str, token: str, body: dict | None) -> tuple[int, dict]:
    """An HTTP request from another process."""
    out = subprocess.run([sys.executable, "-c", _CLIENT, url, token,
                          json.dumps(body) if body is not None else ""],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    status, _, text = out.stdout.partition(" ")
    return int(status), json.loads(text)


@pytest.mark.slow  # a Ray Serve deployment with its HTTP proxy
def test_no_completion_is_served_without_the_deployments_token(ray_local):
    from ray import serve

    from df_ray.engines.spec import make_spec
    from df_ray.serving.apps import ServeOptions, deploy, stop
    from tests.helpers import PIPELINE_SCRIPT, free_ports

    serve.shutdown()  # Serve's HTTP options apply when it starts
    (port,) = free_ports(1)
    token = "the-deployment-token-0123456789"
    spec = make_spec(kind="scripted", model="m1", script=PIPELINE_SCRIPT)
    deploy({"auth1": spec}, ServeOptions(num_cpus=0), http_host="127.0.0.1", http_port=port,
           token_sha256=token_digest(token), say=lambda m: None)
    try:
        url = f"http://127.0.0.1:{port}/auth1/v1/chat/completions"

        def generated() -> int:
            h = serve.get_deployment_handle("EngineServer", "auth1")
            return h.stats.remote().result(timeout_s=30)["generated"]

        before = generated()
        body = {"messages": MSG, "max_tokens": 20}
        status, out = ask(url, "", body)
        assert status == 401 and "bearer token is required" in out["error"]["message"]
        status, out = ask(url, "another-token-entirely", body)
        assert status == 403 and "choices" not in out
        status, _ = ask(f"http://127.0.0.1:{port}/auth1/v1/models", "", None)
        assert status == 401
        for field, value in (("temperature", float("nan")), ("top_p", -1.0),
                             ("max_tokens", 10**9)):
            status, out = ask(url, token, {**body, field: value})
            assert status == 400 and out["error"]["param"] == field, out
        assert generated() == before  # nothing refused reached the engine
        status, out = ask(url, token, body)
        assert status == 200 and out["choices"][0]["message"]["content"].startswith("A is right")
        assert generated() == before + 1
    finally:
        stop(["auth1"], say=lambda m: None)
        serve.shutdown()
