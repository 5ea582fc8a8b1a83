"""What the ext_proc hop adds through a real Envoy (issue 51), against the sidecar's own Assemble.

Starts, on loopback ports chosen free at run time:
  - the release sidecar (`--listen 127.0.0.1:P --metrics-listen 127.0.0.1:M --memory-store off`);
  - an upstream stub: a small Go net/http server (built from the source below with the Go toolchain when
    there is one, else a threaded Python server), answering every request 200 with an 11-byte body and two
    headers saying what arrived (`x-stub-body-bytes`, `x-stub-input-tokens`; the checks' requests get the
    body back); it costs the same with and without the filter, less the bytes a fit removed;
  - one Envoy 1.40 (`--concurrency 1`) with two listeners routing to that stub: `with_filter` runs the
    sidecar as its external processor (BUFFERED request body, failure_mode_allow false, nothing of the
    response sent, message_timeout 5s, as docs/gateway.md configures it), `without_filter` runs only the
    router.

Four cells: conversations of about 8k and 32k o200k tokens (a system prompt, then alternating user and
assistant turns of prose, generated from a seed, counted with tiktoken's o200k from the vocabulary vendored
in tiktoken-rs), each "fitted" (`x-context-budget` at half the conversation: 4000 and 16000) and "fits" (no
header; gpt-4o's window is 128k). In each cell the client (this process, concurrency 1) sends three arms in
blocks, rotating which goes first: the body over one persistent HTTP/1.1 connection to `with_filter`, the
same bytes to `without_filter`, and the same conversation as one `Assemble` gRPC call straight to the sidecar
(the system prompt a static segment, the turns before the last a RECENT_TURNS block of items with roles, the
last user message the query, the budget as max_input_tokens; the request serialized once, sent as bytes).
Every request's latency is recorded (from the first byte sent to the last byte of the answer read);
server CPU is read around each block from each process's CPU-time clock (clock_getcpuclockid: its
utime+stime, in ns) and divided by the block's requests. Each cell is warmed first (the sidecar caches token
counts): the figures are warm. With --cold every request of every arm is a conversation never sent before
(the same shape, another seed). With --no-cache-key the sidecar runs with `[gateway] prompt_cache_key =
false`: by default it adds OpenAI's `prompt_cache_key` to a body that has none, so even a request that fits
comes back from it as a whole new body; without that a request that fits is answered with no body at all.

After the blocks, one run of each of the two sidecar arms alone, with the sidecar's /metrics read around it:
its phases (the one Assemble flow both edges call: tokenize, allocate, render; the gRPC edge's decode,
convert, encode), so the CPU outside the flow can be compared edge to edge.

Each cell first checks one request of each arm (the stub echoes the body that reached it): a fitted request
arrives smaller, the client's messages in order and byte for byte (a summary of the cut turns may stand in
for them), counted at most the budget and as tiktoken recounts it; a request that fits arrives as sent,
but for the `prompt_cache_key` member the sidecar adds, counted as tiktoken counts it; the plain listener
passes the body as sent; Assemble answers within the budget. The sidecar's gateway outcomes over the blocks
must all be `fitted` (or all `unchanged`). Any failed check fails the run (exit 1).

Usage:
  python3 benches/ext_proc_hop.py --sidecar BIN --envoy BIN [--quick] [--cold] [--no-cache-key] [--json OUT]
  python3 benches/ext_proc_hop.py --summarize RUN.json...   # the median over runs, one table

benches/ext_proc_hop.sh builds, installs and runs it; docs/benchmarks/ext_proc_hop.md holds the results.
"""

import argparse
import ctypes
import json
import math
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import string
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "envoy"))

import procs  # noqa: E402  (tests/envoy: children that die with this process, free ports)

MODEL = "gpt-4o"
CHAT = "/v1/chat/completions"
ASSEMBLE = "/context_assembler.v1.Assembler/Assemble"
HEALTH = "/grpc.health.v1.Health/Check"
READY_SECONDS = 60
REQUEST_SECONDS = 10
ARMS = ("with_filter", "filter_floor", "without_filter", "assemble")
# The filter_floor arm: the same bytes through the filter at a path the sidecar does not fit, so it answers
# both of Envoy's messages with CONTINUE and no change. What that costs over the plain listener is the
# ext_proc hop itself (Envoy buffering the body, copying it into a gRPC message, two message round trips)
# with nothing fitted: the floor the fit's own cost is measured above.
FLOOR_PATH = "/v1/bench/floor"

# (cell name, conversation tokens, budget or None)
CELLS = (
    ("8k fitted", 8000, 4000),
    ("8k fits", 8000, None),
    ("32k fitted", 32000, 16000),
    ("32k fits", 32000, None),
)

FULL = {"warmup": 60, "blocks": 100, "block": 20}
QUICK = {"warmup": 5, "blocks": 2, "block": 5}
# Cold requests are generated ahead of each block; fewer of them.
COLD_FULL = {"warmup": 10, "blocks": 10, "block": 10}

STUB_GO = r"""
// The upstream stub: answers every request 200 with {"ok":true} and says what arrived.
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
)

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	os.Stdout.Close()
	answer := []byte(`{"ok":true}`)
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["X-Stub-Input-Tokens"] = []string{r.Header.Get("x-context-assembler-input-tokens")}
		h["Content-Type"] = []string{"application/json"}
		if r.Header.Get("x-stub-echo") != "" { // a check: the body that arrived, as the answer
			body, _ := io.ReadAll(r.Body)
			h["X-Stub-Body-Bytes"] = []string{strconv.Itoa(len(body))}
			h["Content-Length"] = []string{strconv.Itoa(len(body))}
			w.Write(body)
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		h["X-Stub-Body-Bytes"] = []string{strconv.FormatInt(n, 10)}
		h["Content-Length"] = []string{"11"}
		w.Write(answer)
	}))
}
"""

STUB_PY = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n)
        answer = body if self.headers.get("x-stub-echo") else b'{"ok":true}'
        self.send_response(200)
        self.send_header("x-stub-body-bytes", str(n))
        self.send_header("x-stub-input-tokens", self.headers.get("x-context-assembler-input-tokens", ""))
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
sys.stdout.close()
s.serve_forever()
"""

ENVOY_YAML = string.Template(r"""
admin:
  address:
    socket_address: {address: 127.0.0.1, port_value: ${ADMIN_PORT}}
static_resources:
  listeners:
  - name: with_filter
    address:
      socket_address: {address: 127.0.0.1, port_value: ${FILTER_PORT}}
    per_connection_buffer_limit_bytes: 4194304
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: with_filter
          route_config: &route_config
            name: to_stub
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: stub, timeout: 10s}
          http_filters:
          - name: envoy.filters.http.ext_proc.context_assembler
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
              grpc_service:
                envoy_grpc: {cluster_name: sidecar}
                timeout: 5s
              processing_mode:
                request_header_mode: SEND
                request_body_mode: ${BODY_MODE}
                request_trailer_mode: ${TRAILER_MODE}
                response_header_mode: SKIP
                response_body_mode: NONE
                response_trailer_mode: SKIP
              message_timeout: 5s
              failure_mode_allow: false
              allow_mode_override: false
              metadata_options:
                receiving_namespaces: {untyped: [context_assembler]}
          - &router
            name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  - name: without_filter
    address:
      socket_address: {address: 127.0.0.1, port_value: ${PLAIN_PORT}}
    per_connection_buffer_limit_bytes: 4194304
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: without_filter
          route_config: *route_config
          http_filters:
          - *router
  clusters:
  - name: sidecar
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {}
    load_assignment:
      cluster_name: sidecar
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {address: 127.0.0.1, port_value: ${SIDECAR_PORT}}
  - name: stub
    type: STATIC
    connect_timeout: 1s
    per_connection_buffer_limit_bytes: 4194304
    load_assignment:
      cluster_name: stub
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {address: 127.0.0.1, port_value: ${STUB_PORT}}
""")


# --- CPU clocks -----------------------------------------------------------------------------------

_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def cpu_clock(pid):
    """The CPU-time clock of process `pid` (its utime+stime, all threads, to the ns)."""
    clock = ctypes.c_int()
    err = _libc.clock_getcpuclockid(pid, ctypes.byref(clock))
    if err:
        raise OSError(err, f"clock_getcpuclockid({pid})")
    return clock.value


def stat_cpu_seconds(pid):
    """utime+stime of `pid` from /proc/PID/stat (in clock ticks, as seconds): the cross-check."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds():
    """CPU time every process of the machine has used (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def builds_running():
    """The names of compiler or cargo processes running now (another engineer's build)."""
    seen = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm in ("cargo", "rustc", "cc", "ld", "cc1", "cc1plus", "go", "compile", "javac", "mvn"):
            seen.add(comm)
    return sorted(seen)


# --- conversations --------------------------------------------------------------------------------

WORDS = (
    "the of and to in is that for it as with was on be by this are from at or an have not which but "
    "all were when we there can more if will one about up so out would into has time only new some could "
    "these two may then do first any like now my such make over our even most after also did many before "
    "must through back years where much your way well down should because each just those people how too "
    "little state good very world still own see men work long get here between both life being under never "
    "day same another know while last might great old year off come since against go came right used take "
    "three himself few house use during without again place around however home small found thought went "
    "say part once general high upon school every does got united left number course war until always away "
    "something fact though water less public put think almost hand enough far took head yet government "
    "system better set told nothing night end why called did eyes find going look asked later knew point "
    "next city business give group toward young days let room president side social given present several "
    "order national possible rather second face per among form important often things looked early white "
    "case john become large big need four within felt along children saw best church ever least power "
    "development light thing seemed family interest want members mind country area others done turned "
    "although open problem service certain kind began different door thus help means sense whole matter "
    "perhaps itself york times law human line above name example action company hands local show whether "
    "five history gave today either act feet across taken past quite anything having seen death experience "
    "body word half really week field research sidecar request budget gateway token prompt window cache "
    "latency envoy filter model conversation summary retrieval evidence policy schema deployment cluster"
).split()


def sentence(rng):
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 20))]
    if len(words) > 10 and rng.random() < 0.4:
        words[rng.randint(3, len(words) - 4)] += ","
    return " ".join(words).capitalize() + rng.choice(".........?!")


def paragraph(rng, lo, hi):
    return " ".join(sentence(rng) for _ in range(rng.randint(lo, hi)))


def conversation(seed, turns=None, tokens=None, count=None):
    """A system prompt and alternating user/assistant turns ending with a user turn, from `seed`: `turns`
    turns, or as many as bring the chat count (`count(messages)`) to at least `tokens`."""
    rng = random.Random(f"ext-proc-hop/{seed}")
    messages = [{"role": "system", "content": "You are the support assistant of a deployment team. "
                 + paragraph(rng, 8, 12)}]

    def add():
        user = (len(messages) - 1) % 2 == 0
        text = paragraph(rng, 2, 5) if user else "\n\n".join(paragraph(rng, 3, 6) for _ in range(rng.randint(2, 4)))
        messages.append({"role": "user" if user else "assistant", "content": text})

    if turns is not None:
        while len(messages) - 1 < turns:
            add()
    else:
        while count(messages) < tokens or messages[-1]["role"] != "user":
            add()
    return messages


def chat_body(messages):
    return json.dumps({"model": MODEL, "messages": messages}, separators=(",", ":")).encode()


def http_request(body, budget, echo=False, path=CHAT):
    head = [f"POST {path} HTTP/1.1", "host: bench", "content-type: application/json",
            f"content-length: {len(body)}"]
    if budget is not None:
        head.append(f"x-context-budget: {budget}")
    if echo:
        head.append("x-stub-echo: 1")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def assemble_request(pb, messages, budget):
    """The same conversation as an AssembleRequest: the system prompt a static segment, the turns before
    the last a RECENT_TURNS block of items with roles, the last user message the query."""
    roles = {"user": pb.ROLE_USER, "assistant": pb.ROLE_ASSISTANT}
    req = pb.AssembleRequest(
        model=MODEL,
        static_segments=[pb.Segment(id="system", kind=pb.SEGMENT_KIND_SYSTEM, content=messages[0]["content"])],
        blocks=[pb.Block(name="conversation", kind=pb.BLOCK_KIND_RECENT_TURNS, items=[
            pb.Item(id=str(i), content=m["content"], role=roles[m["role"]], trusted=True)
            for i, m in enumerate(messages[1:-1])])],
        query=messages[-1]["content"],
    )
    if budget is not None:
        req.max_input_tokens = budget
    return req.SerializeToString()


# --- clients --------------------------------------------------------------------------------------

class Http1:
    """One persistent HTTP/1.1 connection; a request is bytes prepared once, an answer is read whole."""

    def __init__(self, port):
        self.port = port
        self.sock = None
        self.rest = b""

    def close(self):
        if self.sock is not None:
            self.sock.close()
        self.sock = None
        self.rest = b""

    def roundtrip(self, raw):
        """(status, {lower-case header: value}, body) of one request."""
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=REQUEST_SECONDS)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(raw)
        buf = self.rest
        while (end := buf.find(b"\r\n\r\n")) < 0:
            buf += self._recv()
        lines = buf[:end].decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = buf[end + 4:]
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            body += self._recv()
        self.rest = body[length:]
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, body[:length]

    def _recv(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            self.close()
            raise ConnectionError("the connection closed mid-answer")
        return chunk


def percentile(sorted_values, q):
    """Nearest-rank percentile of an ascending list."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def scrape(port):
    """{(name, frozenset(labels)): value} of the sidecar's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        name, _, labels = key.partition("{")
        pairs = frozenset(tuple(p.split("=", 1)) for p in labels.rstrip("}").split(",") if "=" in p)
        try:
            out[(name, pairs)] = float(value)
        except ValueError:
            pass
    return out


def metric(samples, name, **labels):
    want = {(k, f'"{v}"') for k, v in labels.items()}
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


# --- the run --------------------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="ext-proc-hop-")
        self.children = []
        self.problems = []
        self.pb = None
        self.with_filter = self.without_filter = self.channel = None

    def stop(self):
        for client in (self.with_filter, self.without_filter, self.channel):
            if client is not None:
                client.close()
        for child in reversed(self.children):
            try:
                child.stop(wait=3)
            except Exception:  # noqa: BLE001 - stopping the rest matters more
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def check(self, ok, message):
        if not ok:
            self.problems.append(message)
            print(f"FAIL {message}", file=sys.stderr, flush=True)

    def start_stub(self):
        argv, kind = [sys.executable, "-c", STUB_PY], "python ThreadingHTTPServer"
        go = shutil.which("go")
        if go:
            src = os.path.join(self.dir, "stub.go")
            with open(src, "w") as f:
                f.write(STUB_GO)
            binary = os.path.join(self.dir, "stub")
            env = dict(os.environ, GO111MODULE="off", CGO_ENABLED="0", GOFLAGS="")
            built = subprocess.run([go, "build", "-o", binary, src], env=env, timeout=180,
                                   stdin=subprocess.DEVNULL, capture_output=True, text=True)
            if built.returncode == 0:
                argv, kind = [binary], "go net/http (GOMAXPROCS=1)"
            else:
                print(f"the Go stub did not build, a Python one instead:\n{built.stderr}", file=sys.stderr)
        stub = procs.Proc("stub", argv, os.path.join(self.dir, "stub.log"))
        # The stub prints its port on stdout: read it from a pipe, not the log.
        with open(stub.log_path, "ab") as log:
            stub.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                          preexec_fn=procs._die_with_parent, env=dict(os.environ, GOMAXPROCS="1"))
        self.children.append(stub)
        line = stub.popen.stdout.readline()
        if not line.strip().isdigit():
            raise SystemExit(f"the stub did not start: {stub.tail()}")
        self.stub, self.stub_port, self.stub_kind = stub, int(line), kind

    def start(self):
        self.start_stub()
        ports = {"SIDECAR_PORT": procs.free_port(), "ADMIN_PORT": procs.free_port(),
                 "FILTER_PORT": procs.free_port(), "PLAIN_PORT": procs.free_port(),
                 "STUB_PORT": self.stub_port}
        self.ports = ports
        self.metrics_port = procs.free_port()
        argv = [self.args.sidecar, "--listen", f"127.0.0.1:{ports['SIDECAR_PORT']}",
                "--metrics-listen", f"127.0.0.1:{self.metrics_port}", "--memory-store", "off", "--drain-secs", "1"]
        if self.args.no_cache_key:
            config = os.path.join(self.dir, "sidecar.toml")
            with open(config, "w") as f:
                f.write("[gateway]\nprompt_cache_key = false\n")
            argv += ["--config", config]
        sidecar = procs.Proc("sidecar", argv, os.path.join(self.dir, "sidecar.log")).start()
        self.children.append(sidecar)
        self.sidecar = sidecar

        config = os.path.join(self.dir, "envoy.yaml")
        with open(config, "w") as f:
            modes = ({"BODY_MODE": "FULL_DUPLEX_STREAMED", "TRAILER_MODE": "SEND"} if self.args.duplex
                     else {"BODY_MODE": "BUFFERED", "TRAILER_MODE": "SKIP"})
            f.write(ENVOY_YAML.substitute(ports, **modes))
        ok, out = procs.validate(self.args.envoy, config)
        if not ok:
            raise SystemExit(f"envoy refused the bootstrap:\n{out}")
        envoy = procs.Envoy(self.args.envoy, config, ports["ADMIN_PORT"], os.path.join(self.dir, "envoy.log"))
        self.children.append(envoy.start())
        self.envoy = envoy

        import grpc

        try:
            from context_assembler import wait_ready
        except ImportError:  # not installed: the package's source in this checkout
            sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
            from context_assembler import wait_ready
        from context_assembler.v1 import assembler_pb2

        self.pb = assembler_pb2
        self.channel = grpc.insecure_channel(f"127.0.0.1:{ports['SIDECAR_PORT']}", options=[
            ("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)])
        try:
            wait_ready(self.channel, READY_SECONDS)
        except TimeoutError as e:
            raise SystemExit(f"the sidecar is not serving: {e}\n{sidecar.tail()}") from e
        if not envoy.wait_ready(READY_SECONDS):
            raise SystemExit(f"envoy is not ready:\n{envoy.tail()}")
        # Bytes in, bytes out: the request is serialized once, the answer parsed only when checked.
        self.assemble = self.channel.unary_unary(ASSEMBLE)
        self.health = self.channel.unary_unary(HEALTH)
        self.clocks = {"sidecar": cpu_clock(sidecar.popen.pid), "envoy": cpu_clock(envoy.popen.pid),
                       "stub": cpu_clock(self.stub.popen.pid)}
        self.with_filter = Http1(ports["FILTER_PORT"])
        self.without_filter = Http1(ports["PLAIN_PORT"])

    def cpu(self):
        return {k: time.clock_gettime_ns(c) for k, c in self.clocks.items()}

    # --- one cell ---

    def prepare(self, seed, tokens, budget, count, turns=None):
        messages = conversation(seed, turns=turns, tokens=tokens, count=count)
        body = chat_body(messages)
        return {
            "messages": messages,
            "body": body,
            "body_bytes": len(body),
            "http": http_request(body, budget),
            "floor_http": http_request(body, budget, path=FLOOR_PATH),
            "floor_echo": http_request(body, budget, echo=True, path=FLOOR_PATH),
            "assemble": assemble_request(self.pb, messages, budget),
            # The checks' requests: the stub answers with the body that reached it.
            "echo": http_request(body, budget, echo=True),
        }

    def send(self, arm, conv):
        """(latency in ns, answer) of one request of `arm`."""
        if arm == "assemble":
            raw = conv["assemble"]
            t0 = time.perf_counter_ns()
            answer = self.assemble(raw, timeout=REQUEST_SECONDS)
            return time.perf_counter_ns() - t0, answer
        client = self.without_filter if arm == "without_filter" else self.with_filter
        raw = conv["floor_http"] if arm == "filter_floor" else conv["http"]
        t0 = time.perf_counter_ns()
        answer = client.roundtrip(raw)
        elapsed = time.perf_counter_ns() - t0
        if answer[0] != 200:
            raise RuntimeError(f"{arm}: HTTP {answer[0]} {answer[2][:200]!r}")
        return elapsed, answer

    def verify(self, name, arm, conv, budget, count, facts):
        """Sends `conv` once by `arm` and checks what arrived; records what it says in `facts`."""
        if arm == "assemble":
            answer = self.assemble(conv["assemble"], timeout=REQUEST_SECONDS)
            resp = self.pb.AssembleResponse.FromString(answer)
            facts["assemble_input_tokens"] = resp.usage.total_tokens
            kept = sum(len(d.kept_item_ids) for d in resp.decisions)
            facts["assemble_turns_kept"] = kept
            if budget is not None:
                self.check(resp.usage.total_tokens <= budget,
                           f"{name}: Assemble used {resp.usage.total_tokens} tokens over the budget {budget}")
                self.check(kept < len(conv["messages"]) - 2, f"{name}: Assemble cut no turn")
            else:
                self.check(kept == len(conv["messages"]) - 2, f"{name}: Assemble cut a turn of a conversation that fits")
            return
        client = self.without_filter if arm == "without_filter" else self.with_filter
        status, headers, echoed = client.roundtrip(conv["floor_echo"] if arm == "filter_floor" else conv["echo"])
        sent, original = conv["body"], conv["messages"]
        counted = headers.get("x-stub-input-tokens", "")
        self.check(status == 200, f"{name}: {arm} answered {status} {echoed[:200]!r}")
        if arm in ("without_filter", "filter_floor"):
            self.check(echoed == sent and counted == "",
                       f"{name}: {arm}: the stub got {len(echoed)} bytes of {len(sent)} ({counted!r})")
            return
        facts["fitted_body_bytes"] = len(echoed)
        facts["sidecar_input_tokens"] = int(counted) if counted.isdigit() else None
        self.check(counted.isdigit(), f"{name}: the request reached the stub without the count header")
        got = json.loads(echoed)
        facts["fields_added"] = sorted(set(got) - {"model", "messages"})
        if budget is None:
            # It fits: the client's bytes, at most with a prompt_cache_key member added.
            key = got.pop("prompt_cache_key", None)
            same = echoed == sent
            if key is not None and not self.args.no_cache_key:
                member = b'"prompt_cache_key":' + json.dumps(key).encode()
                same = any(echoed.replace(m, b"", 1) == sent for m in (b"," + member, member + b","))
            self.check(same and got == {"model": MODEL, "messages": original},
                       f"{name}: a request that fits reached the stub changed ({len(echoed)} of {len(sent)} bytes)")
            self.check(counted == str(count(original)),
                       f"{name}: the sidecar counts {counted} tokens, tiktoken {count(original)}")
            return
        # The fitted messages: the client's, in order, system and newest kept, some cut; a summary of
        # the cut turns (a user message the sidecar writes) may stand in for them.
        summaries = [m for m in got["messages"] if str(m.get("content", "")).startswith("<summary ")]
        facts["summary_inserted"] = len(summaries)
        kept = [m for m in got["messages"] if m not in summaries]
        at = 0
        for m in kept:
            while at < len(original) and original[at] != m:
                at += 1
            at += 1
        self.check(at <= len(original) and kept[0] == original[0] and kept[-1] == original[-1]
                   and len(kept) < len(original),
                   f"{name}: the fitted messages are not the client's, system and newest kept, some cut")
        spliced = all(json.dumps(m, separators=(",", ":")).encode() in echoed for m in kept)
        self.check(spliced, f"{name}: a kept message is not the client's bytes")
        recount = count(got["messages"])
        self.check(counted.isdigit() and int(counted) <= budget and counted == str(recount),
                   f"{name}: the fitted request counts {counted} tokens (tiktoken {recount}), budget {budget}")

    def cell(self, name, target, budget, count, plan):
        cold = self.args.cold
        started = time.monotonic()
        print(f"cell {name}{' (cold)' if cold else ''}: ", end="", file=sys.stderr, flush=True)
        warm_conv = self.prepare(f"{name}/warm", target, budget, count)
        turns = len(warm_conv["messages"]) - 1
        tokens_of = count(warm_conv["messages"])
        facts = {"tokens": tokens_of, "turns": turns, "budget": budget, "body_bytes": warm_conv["body_bytes"]}
        serial = iter(range(10 ** 9))

        def fresh(n):
            # Cold: conversations never sent, the warm one's shape; their tiktoken count is not checked.
            return [self.prepare(f"{name}/cold/{next(serial)}", None, budget, None, turns=turns) for _ in range(n)]

        # Checks, then the warm-up, every arm.
        for arm in ARMS:
            self.verify(name, arm, warm_conv, budget, count, facts)
        arms = tuple(a for a in ARMS if not self.args.arms or a in self.args.arms)
        for _ in range(plan["warmup"]):
            convs = fresh(1) if cold else [warm_conv]
            for arm in arms:
                self.send(arm, convs[0])

        lat = {arm: [] for arm in arms}
        cpu = {arm: {"sidecar": 0, "envoy": 0, "stub": 0} for arm in arms}
        floor = []
        before = scrape(self.metrics_port)
        for b in range(plan["blocks"]):
            order = arms[b % len(arms):] + arms[:b % len(arms)]
            for arm in order:
                convs = fresh(plan["block"]) if cold else [warm_conv] * plan["block"]
                c0 = self.cpu()
                for conv in convs:
                    elapsed, _ = self.send(arm, conv)
                    lat[arm].append(elapsed)
                c1 = self.cpu()
                for k in c0:
                    cpu[arm][k] += c1[k] - c0[k]
            # The transport's floor: a trivial RPC on the same channel (health Check), a few per block.
            for _ in range(3):
                t0 = time.perf_counter_ns()
                self.health(b"", timeout=REQUEST_SECONDS)
                floor.append(time.perf_counter_ns() - t0)
            print(".", end="", file=sys.stderr, flush=True)
        after = scrape(self.metrics_port)
        # The sidecar's phases, one arm at a time (the histogram has no rpc label): the one Assemble
        # flow (tokenize, allocate, render) that both edges call, and the gRPC edge's decode, convert
        # and encode; what the ext_proc edge adds (JSON, splice, its messages) has no phase of its own.
        phases = {}
        for arm in ("with_filter", "assemble"):
            n = plan["block"] * 2
            s0 = scrape(self.metrics_port)
            c0 = self.cpu()["sidecar"]
            for conv in (fresh(n) if cold else [warm_conv] * n):
                self.send(arm, conv)
            c1 = self.cpu()["sidecar"]
            s1 = scrape(self.metrics_port)
            phases[arm] = {ph: (metric(s1, "assembler_phase_duration_seconds_sum", phase=ph)
                                - metric(s0, "assembler_phase_duration_seconds_sum", phase=ph)) / n * 1e6
                           for ph in ("decode", "convert", "tokenize", "allocate", "render", "encode")}
            phases[arm]["sidecar_cpu"] = (c1 - c0) / n / 1e3
        print(file=sys.stderr, flush=True)

        result = dict(facts)
        result["seconds"] = round(time.monotonic() - started, 1)
        result["arms"] = {}
        for arm in arms:
            xs = sorted(lat[arm])
            n = len(xs)
            result["arms"][arm] = {
                "requests": n,
                "p50_us": percentile(xs, 0.50) / 1e3,
                "p99_us": percentile(xs, 0.99) / 1e3,
                "mean_us": statistics.fmean(xs) / 1e3,
                "sidecar_cpu_us": cpu[arm]["sidecar"] / n / 1e3,
                "envoy_cpu_us": cpu[arm]["envoy"] / n / 1e3,
                "stub_cpu_us": cpu[arm]["stub"] / n / 1e3,
            }
        fs = sorted(floor)
        result["grpc_floor_p50_us"] = percentile(fs, 0.5) / 1e3
        # The sidecar's handler time by rpc (for ExtProc, the stream's whole life, Envoy's turns included;
        # the with_filter and filter_floor streams together).
        server = {}
        for rpc, arm in (("ExtProc", "with_filter"), ("Assemble", "assemble")):
            n = metric(after, "assembler_request_duration_seconds_count", rpc=rpc) - \
                metric(before, "assembler_request_duration_seconds_count", rpc=rpc)
            s = metric(after, "assembler_request_duration_seconds_sum", rpc=rpc) - \
                metric(before, "assembler_request_duration_seconds_sum", rpc=rpc)
            server[arm] = {"requests": n, "handler_mean_us": s / n * 1e6 if n else None}
        outcomes = {}
        for outcome in ("fitted", "unchanged", "passed", "refused"):
            outcomes[outcome] = metric(after, "assembler_gateway_requests_total", outcome=outcome) - \
                metric(before, "assembler_gateway_requests_total", outcome=outcome)
        result["server"] = server
        result["phases_us"] = phases
        result["gateway_outcomes"] = outcomes
        expect = "fitted" if budget is not None else "unchanged"
        self.check("with_filter" not in arms or outcomes[expect] == result["arms"]["with_filter"]["requests"],
                   f"{name}: the sidecar's outcomes {outcomes}, expected all {expect}")
        return result

    def run(self):
        import openai_count  # tests/envoy: tiktoken's o200k from tiktoken-rs's vendored vocabulary

        def count(messages):
            return openai_count.chat_tokens({"messages": messages})

        plan = dict(COLD_FULL if self.args.cold and not self.args.quick else QUICK if self.args.quick else FULL)
        for key in ("warmup", "blocks", "block"):
            if getattr(self.args, key) is not None:
                plan[key] = getattr(self.args, key)
        started = time.time()
        builds = set(builds_running())
        stat0 = {k: stat_cpu_seconds(p.popen.pid) for k, p in (("sidecar", self.sidecar), ("envoy", self.envoy))}
        clk0 = self.cpu()
        busy0, own0, wall0 = machine_busy_seconds(), sum(os.times()[:2]), time.monotonic()
        cells = {}
        for name, target, budget in CELLS:
            if self.args.cells and name not in self.args.cells:
                continue
            cells[name] = self.cell(name, target, budget, count, plan)
            builds |= set(builds_running())
        stat1 = {k: stat_cpu_seconds(p.popen.pid) for k, p in (("sidecar", self.sidecar), ("envoy", self.envoy))}
        clk1 = self.cpu()
        busy1, own1, wall1 = machine_busy_seconds(), sum(os.times()[:2]), time.monotonic()
        # What else ran on the machine meanwhile: its busy time less this run's processes (the driver
        # with its gRPC threads, the sidecar, Envoy, the stub), as a share of all cores.
        ours = (own1 - own0) + sum(clk1[k] - clk0[k] for k in clk0) / 1e9
        others = max(0.0, (busy1 - busy0) - ours) / ((wall1 - wall0) * os.cpu_count())
        if self.args.commit:
            commit = self.args.commit.removesuffix("+dirty")
            dirty = self.args.commit.endswith("+dirty")
        else:
            commit, dirty = source_state()
        return {
            "commit": commit,
            "src_dirty": dirty,
            "sidecar": self.args.sidecar,
            "envoy_version": subprocess.run([self.args.envoy, "--version"], capture_output=True, text=True,
                                            timeout=30).stdout.strip().split("version:")[-1].strip(),
            "stub": self.stub_kind,
            "machine": f"{os.cpu_count()} cores, {platform.machine()}, {platform.release()}",
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
            "seconds": round(time.time() - started, 1),
            "loadavg_end": os.getloadavg(),
            "builds_seen": sorted(builds),
            "others_cpu_share": round(others, 3),
            "cold": self.args.cold,
            "no_cache_key": self.args.no_cache_key,
            "duplex": self.args.duplex,
            "plan": plan,
            # /proc/PID/stat's utime+stime against the CPU clock over the whole run (ticks: 10 ms).
            "cpu_crosscheck_s": {k: {"stat": round(stat1[k] - stat0[k], 2), "clock": round((clk1[k] - clk0[k]) / 1e9, 3)}
                                 for k in stat0},
            "cells": cells,
        }


def arms_of(result):
    """The arms every cell of a run measured."""
    cells = list(result["cells"].values())
    return set.intersection(*(set(c["arms"]) for c in cells)) if cells else set()


def git(*args):
    try:
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def source_state():
    """(the checkout's commit, whether what the binary is built from differs from it)."""
    dirty = git("status", "--porcelain", "--", "src", "Cargo.toml", "Cargo.lock", "build.rs", "proto")
    return git("rev-parse", "--short", "HEAD"), bool(dirty)


# --- the table ------------------------------------------------------------------------------------

def summarize(runs):
    """One table: per cell, the median over runs of each figure (differences and ratios taken within each
    run first)."""
    names = [n for n, _, _ in CELLS if all(n in r["cells"] for r in runs)]

    def med(f):
        return statistics.median(f(r) for r in runs)

    def rng(f):
        vals = [f(r) for r in runs]
        return f" ({min(vals):.0f}-{max(vals):.0f})" if len(vals) > 1 else ""

    lines = []
    first = runs[0]
    lines.append(f"commit {first['commit']}{' (src/ had uncommitted changes)' if first['src_dirty'] else ''}, "
                 f"envoy {first['envoy_version']}, stub {first['stub']}, {first['machine']}; "
                 f"{len(runs)} run(s), {'cold' if first['cold'] else 'warm'}"
                 f"{', [gateway] prompt_cache_key = false' if first.get('no_cache_key') else ''}"
                 f"{', FULL_DUPLEX_STREAMED' if first.get('duplex') else ', BUFFERED'}; "
                 f"per arm and cell {first['plan']['blocks']} blocks of {first['plan']['block']} requests; "
                 f"builds seen during the runs: {', '.join(sorted({b for r in runs for b in r['builds_seen']})) or 'none'}")
    lines.append("")
    lines.append("| cell | tokens (budget) | without filter p50 / p99 µs | with filter p50 / p99 µs "
                 "| difference p50 / p99 µs | Assemble p50 / p99 µs | gRPC floor p50 µs "
                 "| sidecar CPU µs/req: filtered / Assemble | Envoy CPU µs/req: without / with (delta) "
                 "| target: p50 difference <= Assemble p50 (their ratio) |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for n in names:
        def a(arm, key, n=n):
            return lambda r: r["cells"][n]["arms"][arm][key]

        def diff(key, n=n):
            return lambda r: r["cells"][n]["arms"]["with_filter"][key] - r["cells"][n]["arms"]["without_filter"][key]

        c = first["cells"][n]
        held = sum(1 for r in runs if diff("p50_us")(r) <= a("assemble", "p50_us")(r))
        cpu_ratio = lambda r, n=n: (r["cells"][n]["arms"]["with_filter"]["sidecar_cpu_us"]
                                    / r["cells"][n]["arms"]["assemble"]["sidecar_cpu_us"])
        envoy_delta = lambda r, n=n: (r["cells"][n]["arms"]["with_filter"]["envoy_cpu_us"]
                                      - r["cells"][n]["arms"]["without_filter"]["envoy_cpu_us"])
        lines.append(
            f"| {n} | {c['tokens']:,} ({c['budget'] or 'none'}) "
            f"| {med(a('without_filter', 'p50_us')):.0f} / {med(a('without_filter', 'p99_us')):.0f} "
            f"| {med(a('with_filter', 'p50_us')):.0f} / {med(a('with_filter', 'p99_us')):.0f} "
            f"| **{med(diff('p50_us')):.0f}**{rng(diff('p50_us'))} / {med(diff('p99_us')):.0f} "
            f"| **{med(a('assemble', 'p50_us')):.0f}**{rng(a('assemble', 'p50_us'))} / {med(a('assemble', 'p99_us')):.0f} "
            f"| {med(lambda r, n=n: r['cells'][n]['grpc_floor_p50_us']):.0f} "
            f"| {med(a('with_filter', 'sidecar_cpu_us')):.0f} / {med(a('assemble', 'sidecar_cpu_us')):.0f} "
            f"({med(cpu_ratio):.2f}x) "
            f"| {med(a('without_filter', 'envoy_cpu_us')):.0f} / {med(a('with_filter', 'envoy_cpu_us')):.0f} "
            f"({med(envoy_delta):+.0f}) "
            f"| {'held' if held * 2 > len(runs) else 'missed'} ({med(lambda r, n=n: diff('p50_us', n)(r) / a('assemble', 'p50_us', n)(r)):.2f}x); "
            f"held in {held} of {len(runs)} |")
    lines.append("")
    lines.append("| cell | body bytes sent / reaching the stub | input tokens: sidecar (ext_proc) / Assemble "
                 "| the flow (tokenize + allocate + render) µs: filtered / Assemble "
                 "| the rest of the sidecar's CPU µs: filtered / Assemble (decode + convert + encode) "
                 "| stub CPU µs/req: without / with | sidecar CPU µs/req in the blocks without the filter |")
    lines.append("|---|---|---|---:|---:|---:|---:|")
    for n in names:
        c = first["cells"][n]

        def flow(arm, n=n):
            return lambda r: sum(r["cells"][n]["phases_us"][arm][p] for p in ("tokenize", "allocate", "render"))

        def rest(arm, n=n):
            return lambda r: r["cells"][n]["phases_us"][arm]["sidecar_cpu"] - flow(arm)(r)

        def grpc_edge(r, n=n):
            return sum(r["cells"][n]["phases_us"]["assemble"][p] for p in ("decode", "convert", "encode"))
        lines.append(
            f"| {n} | {c['body_bytes']:,} / {c.get('fitted_body_bytes', 0):,} "
            f"| {c.get('sidecar_input_tokens')} / {c.get('assemble_input_tokens')} "
            f"| {med(flow('with_filter')):.0f} / {med(flow('assemble')):.0f} "
            f"| {med(rest('with_filter')):.0f} / {med(rest('assemble')):.0f} ({med(grpc_edge):.0f}) "
            f"| {med(lambda r, n=n: r['cells'][n]['arms']['without_filter']['stub_cpu_us']):.0f} / "
            f"{med(lambda r, n=n: r['cells'][n]['arms']['with_filter']['stub_cpu_us']):.0f} "
            f"| {med(lambda r, n=n: r['cells'][n]['arms']['without_filter']['sidecar_cpu_us']):.1f} |")
    lines.append("")
    lines.append("| cell | the ext_proc floor: through the filter at a path it passes, minus without, p50 µs "
                 "| Envoy CPU µs/req of the floor (delta over without) | sidecar CPU µs/req of the floor "
                 "| the fit over the floor: with filter minus floor, p50 µs "
                 "| Assemble over the gRPC floor: Assemble p50 minus health Check p50, µs "
                 "| their ratio | sidecar CPU µs/req: filtered minus floor / Assemble |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for n in names:
        if not all("filter_floor" in r["cells"][n]["arms"] for r in runs):
            continue

        def arm(name, key, n=n):
            return lambda r: r["cells"][n]["arms"][name][key]

        def minus(x, y, key, n=n):
            return lambda r: arm(x, key, n)(r) - arm(y, key, n)(r)

        def over_grpc(r, n=n):
            return arm("assemble", "p50_us", n)(r) - r["cells"][n]["grpc_floor_p50_us"]

        def ratio(r, n=n):
            return minus("with_filter", "filter_floor", "p50_us", n)(r) / over_grpc(r)

        def cpu_ratio(r, n=n):
            return minus("with_filter", "filter_floor", "sidecar_cpu_us", n)(r) / arm("assemble", "sidecar_cpu_us", n)(r)
        fit_over = minus("with_filter", "filter_floor", "p50_us")
        lines.append(
            f"| {n} | **{med(minus('filter_floor', 'without_filter', 'p50_us')):.0f}**"
            f"{rng(minus('filter_floor', 'without_filter', 'p50_us'))} "
            f"| {med(minus('filter_floor', 'without_filter', 'envoy_cpu_us')):+.0f} "
            f"| {med(arm('filter_floor', 'sidecar_cpu_us')):.0f} "
            f"| **{med(fit_over):.0f}**{rng(fit_over)} "
            f"| **{med(over_grpc):.0f}**{rng(over_grpc)} "
            f"| {med(ratio):.2f}x "
            f"| {med(minus('with_filter', 'filter_floor', 'sidecar_cpu_us')):.0f} / "
            f"{med(arm('assemble', 'sidecar_cpu_us')):.0f} ({med(cpu_ratio):.2f}x) |")
    lines.append("")
    for i, r in enumerate(runs, 1):
        lines.append(f"run {i}: started {r['started']}, {r['seconds']} s, load average at its end "
                     f"{' '.join(f'{x:.2f}' for x in r['loadavg_end'])}, builds seen: {', '.join(r['builds_seen']) or 'none'}, "
                     f"other processes used {100 * r.get('others_cpu_share', 0):.0f}% of the cores; "
                     f"CPU over the run, /proc/PID/stat against the CPU clock: "
                     + ", ".join(f"{k} {v['stat']} s / {v['clock']} s" for k, v in r["cpu_crosscheck_s"].items()))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sidecar")
    p.add_argument("--envoy")
    p.add_argument("--quick", action="store_true", help="a smoke: a few requests per cell")
    p.add_argument("--cold", action="store_true", help="every request a conversation never sent before")
    p.add_argument("--no-cache-key", action="store_true",
                   help="the sidecar with [gateway] prompt_cache_key = false: a request that fits is answered "
                        "without a body")
    p.add_argument("--duplex", action="store_true",
                   help="the filter in FULL_DUPLEX_STREAMED mode (request trailers sent, as that mode requires)")
    p.add_argument("--warmup", type=int)
    p.add_argument("--blocks", type=int)
    p.add_argument("--block", type=int)
    p.add_argument("--cells", nargs="*", help="only these cells (e.g. '32k fitted')")
    p.add_argument("--arms", nargs="*", choices=ARMS,
                   help="only these arms in the blocks (for a profile; the tables need all four)")
    p.add_argument("--json", help="write the run's figures here")
    p.add_argument("--commit", help="the commit the sidecar was built from (suffix +dirty: with uncommitted "
                                    "changes); default: the checkout's, as it is now")
    p.add_argument("--summarize", nargs="+", metavar="RUN_JSON", help="print the median table of these runs")
    args = p.parse_args()
    if args.summarize:
        runs = []
        for path in args.summarize:
            with open(path) as f:
                runs.append(json.load(f))
        print(summarize(runs))
        return 0
    if not (args.sidecar and args.envoy):
        p.error("--sidecar and --envoy are required")
    args.sidecar = os.path.abspath(args.sidecar)

    def terminated(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)
    bench = Bench(args)
    try:
        bench.start()
        result = bench.run()
    finally:
        bench.stop()
    result["problems"] = bench.problems
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if set(arms_of(result)) == set(ARMS):
        print(summarize([result]))
    if bench.problems:
        print(f"{len(bench.problems)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
