"""The upstream stub: an HTTP/1.1 server on 127.0.0.1:0 in a thread.

It records every request it receives (method, path, headers, the raw body
after undoing chunked transfer coding, and whether it came chunked) under
the client's `x-test-id` header, and answers 200 with a small JSON body.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Received:
    __slots__ = ("method", "path", "headers", "body", "chunked")

    def __init__(self, method, path, headers, body, chunked):
        self.method = method
        self.path = path
        self.headers = headers  # {lower-case name: value}
        self.body = body
        self.chunked = chunked


class Stub:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_id = {}  # x-test-id -> [Received]
        self.arrived = threading.Condition(self.lock)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _read_body(self):
                if "chunked" in self.headers.get("transfer-encoding", "").lower():
                    body = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return bytes(body), True
                        body += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("content-length") or 0)
                return self.rfile.read(length), False

            def _handle(self):
                body, chunked = self._read_body()
                headers = {k.lower(): v for k, v in self.headers.items()}
                test_id = headers.get("x-test-id", "")
                got = Received(self.command, self.path, headers, body, chunked)
                with stub.arrived:
                    stub.by_id.setdefault(test_id, []).append(got)
                    stub.arrived.notify_all()
                answer = json.dumps({"id": "stub-" + test_id, "object": "stub", "ok": True}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_POST = do_GET = do_PUT = _handle

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                if not isinstance(sys.exc_info()[1], ConnectionError):  # Envoy closing an idle connection
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="stub", daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def received(self, test_id, wait=0.0):
        """What arrived for `test_id`, waiting up to `wait` seconds for a
        first request."""
        with self.arrived:
            self.arrived.wait_for(lambda: test_id in self.by_id, timeout=wait)
            return list(self.by_id.get(test_id, []))
