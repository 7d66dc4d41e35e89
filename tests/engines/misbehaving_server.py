"""A loopback OpenAI-compatible server that misbehaves on purpose, per request.

The last user message says what the request gets:

- ``hang ...``: no answer at all (the handler waits until the server shuts down);
- ``trickle ...``: a 200 whose body arrives one byte every half second, never finished;
- ``negative ...``: an answer whose ``usage`` says ``prompt_tokens: -50``;
- ``huge-tokens ...``: an answer whose ``usage`` says ``completion_tokens: 10**12``;
- ``retry-after N ...``: the first time, a 429 with ``Retry-After: N``; then an answer;
- anything else: the message echoed, with true token counts.

Every request is recorded (``arrivals``: monotonic arrival time per prompt).
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class MisbehavingServer:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.arrivals: dict[str, list[float]] = defaultdict(list)
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/tokenize":
                    return self._send(404, {"detail": "Not Found"})
                last = body["messages"][-1]["content"]
                with server.lock:
                    server.arrivals[last].append(time.monotonic())
                    seen = len(server.arrivals[last])
                words = last.split()
                if words[0] == "hang":
                    server.stop.wait(600)
                    return None
                if words[0] == "trickle":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    try:
                        while not server.stop.wait(0.5):
                            self.wfile.write(b" ")
                            self.wfile.flush()
                    except OSError:  # the client closed the connection
                        pass
                    return None
                if words[0] == "retry-after" and seen == 1:
                    return self._send(429, {"error": {"message": "slow down"}},
                                      {"Retry-After": words[1]})
                usage = {"prompt_tokens": len(words) + 3, "completion_tokens": len(words)}
                if words[0] == "negative":
                    usage["prompt_tokens"] = -50
                if words[0] == "huge-tokens":
                    usage["completion_tokens"] = 10**12
                return self._send(200, {
                    "id": "x", "object": "chat.completion",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": last}}],
                    "usage": usage})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> MisbehavingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
