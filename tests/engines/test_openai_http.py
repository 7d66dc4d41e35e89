"""OpenAIEngine against a real HTTP server on 127.0.0.1 that mimics the OpenAI / vLLM schema."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("httpx", reason="httpx is not installed (pip install 'df_ray[system]')")

from df_ray.engines import ChatRequest, Message, SamplingParams, make_engine, make_spec
from df_ray.engines.openai_http import EngineError, OpenAIEngine, approximate_tokens


class FakeServer:
    """A tiny OpenAI-compatible server. Knobs: ``fail_first`` (answer 503 that many times),
    ``max_prompt_words`` (400 with vLLM's context-length message above it), ``tokenize`` (serve
    POST /tokenize), ``delay_s`` (per request, to observe concurrency), ``drop_first`` (close the
    connection without answering that many times)."""

    def __init__(self) -> None:
        self.fail_first = 0
        self.drop_first = 0
        self.max_prompt_words = 1000
        self.tokenize = True
        self.delay_s = 0.0
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = 0
        self.peak = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/tokenize":
                    if not server.tokenize:
                        return self._send(404, {"detail": "Not Found"})
                    toks = body["prompt"].split()
                    return self._send(200, {"count": len(toks), "tokens": list(range(len(toks)))})
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"detail": "Not Found"})
                with server.lock:
                    server.bodies.append(body)
                    server.headers.append(dict(self.headers))
                    if server.drop_first > 0:
                        server.drop_first -= 1
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return None
                    if server.fail_first > 0:
                        server.fail_first -= 1
                        return self._send(503, {"error": {"message": "overloaded"}})
                    server.in_flight += 1
                    server.peak = max(server.peak, server.in_flight)
                try:
                    time.sleep(server.delay_s)
                    words = sum(len(m["content"].split()) for m in body["messages"])
                    if words > server.max_prompt_words:
                        msg = (
                            f"This model's maximum context length is {server.max_prompt_words} "
                            f"tokens. However, you requested {words + body['max_tokens']} tokens "
                            f"({words} in the messages, {body['max_tokens']} in the completion)."
                        )
                        return self._send(
                            400, {"object": "error", "message": msg, "type": "BadRequestError"}
                        )
                    if body["model"] != "served-model":
                        return self._send(404, {"error": {"message": "model not found"}})
                    last = body["messages"][-1]["content"]
                    text = f"{last} | seed={body['seed']} t={body['temperature']}"
                    cut = len(text.split()) > body["max_tokens"]
                    text = " ".join(text.split()[: body["max_tokens"]])
                    return self._send(
                        200,
                        {
                            "id": "x",
                            "object": "chat.completion",
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": text},
                                    "finish_reason": "length" if cut else "stop",
                                }
                            ],
                            "usage": {
                                "prompt_tokens": words + 3,
                                "completion_tokens": len(text.split()),
                                "total_tokens": words + 3 + len(text.split()),
                            },
                        },
                    )
                finally:
                    with server.lock:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture
def server():
    s = FakeServer()
    s.thread.start()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def engine(server: FakeServer, **engine_args) -> OpenAIEngine:
    args = {"backoff_s": 0.01, **engine_args}
    spec = make_spec(
        kind="openai",
        model="served-model",
        base_url=server.base_url,
        engine_args=args,
        request_timeout_s=10,
        api_key_env="DF_RAY_TEST_KEY",
    )
    eng = make_engine(spec)
    assert isinstance(eng, OpenAIEngine)
    return eng


def req(prompt: str, *, seed: int = 0, **sampling) -> ChatRequest:
    return ChatRequest(
        model="served-model",
        messages=(Message("system", "be brief"), Message("user", prompt)),
        sampling=SamplingParams(**sampling),
        seed=seed,
    )


def test_generate_sends_the_openai_schema(server, monkeypatch):
    monkeypatch.setenv("DF_RAY_TEST_KEY", "sk-test")
    with engine(server) as eng:
        out = eng.generate(
            [req("hello there", seed=5, temperature=0.3, top_p=0.9, max_tokens=50, stop=("##",))]
        )
    c = out[0]
    assert c.error is None
    assert c.text == "hello there | seed=5 t=0.3"
    assert c.prompt_tokens == 2 + 2 + 3
    assert c.completion_tokens == 5
    body = server.bodies[0]
    assert body["model"] == "served-model"
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello there"},
    ]
    assert (body["seed"], body["temperature"], body["top_p"], body["max_tokens"]) == (
        5,
        0.3,
        0.9,
        50,
    )
    assert body["stop"] == ["##"]
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    assert c.finish_reason == "stop"


def test_the_server_s_finish_reason_is_kept(server, monkeypatch):
    monkeypatch.setenv("DF_RAY_TEST_KEY", "sk-test")
    with engine(server) as eng:
        cut, whole = eng.generate([req("one two three four", max_tokens=3),
                                   req("hi", max_tokens=50)])
    assert (cut.finish_reason, cut.truncated) == ("length", True)
    assert (whole.finish_reason, whole.truncated) == ("stop", False)


def test_batch_is_in_flight_together_and_ordered(server):
    server.delay_s = 0.3
    eng = engine(server)
    reqs = [req(f"prompt {i}", seed=i) for i in range(8)]
    t0 = time.monotonic()
    out = eng.generate(reqs)
    elapsed = time.monotonic() - t0
    assert [c.text.split(" |")[0] for c in out] == [f"prompt {i}" for i in range(8)]
    assert server.peak >= 3
    assert elapsed < 8 * 0.3
    eng.close()


def test_retries_5xx_and_dropped_connections(server):
    server.fail_first = 2
    server.drop_first = 1
    eng = engine(server, max_retries=4)
    c = eng.generate([req("retry me")])[0]
    assert c.error is None and c.text.startswith("retry me")
    assert len(server.bodies) == 4  # 1 dropped + 2 x 503 + 1 success


def test_gives_up_after_bounded_retries(server):
    server.fail_first = 100
    eng = engine(server, max_retries=2)
    with pytest.raises(EngineError, match="after 3 attempts"):
        eng.generate([req("x")])
    assert len(server.bodies) == 3


def test_connection_refused_raises():
    spec = make_spec(
        kind="openai",
        model="m",
        base_url="http://127.0.0.1:9/v1",
        engine_args={"max_retries": 1, "backoff_s": 0.01},
    )
    with pytest.raises(EngineError, match="ConnectError"):
        make_engine(spec).generate([req("x")])


def test_context_length_400_is_an_error_completion(server):
    server.max_prompt_words = 10
    eng = engine(server)
    ok, bad = eng.generate([req("short"), req("word " * 30)])
    assert ok.error is None
    assert bad.text == "" and bad.completion_tokens == 0
    assert bad.error.startswith("context_length_exceeded: HTTP 400")
    assert bad.prompt_tokens == 32


def test_other_4xx_raises(server):
    spec = make_spec(kind="openai", model="no-such-model", base_url=server.base_url)
    with pytest.raises(EngineError, match="404"):
        make_engine(spec).generate([req("x")])


def test_count_tokens_uses_tokenize_endpoint(server):
    eng = engine(server)
    assert eng.count_tokens("a b c d") == 4
    assert eng.tokenize_available is True
    assert eng.count_tokens("") == 0


def test_count_tokens_falls_back_to_approximation(server):
    server.tokenize = False
    eng = engine(server)
    assert eng.count_tokens("abcdefghij") == approximate_tokens("abcdefghij") == 3
    assert eng.tokenize_available is False
