"""The sidecar as Envoy's external processor, through a real Envoy.

Usage: python3 tests/envoy/run.py SIDECAR_BINARY ENVOY_BINARY

Starts, on loopback ports chosen free at run time: the sidecar
(`--listen 127.0.0.1:PORT`), an upstream stub (stub.py, in a thread) and
Envoy with the bootstrap in bootstrap.yaml (three listeners: BUFFERED with
failure_mode_allow false and true, FULL_DUPLEX_STREAMED with false; each
ext_proc to the sidecar, then the router to the stub; an access log with the
sidecar's dynamic metadata). Then sends LLM chat requests through Envoy and
checks what the stub received, what the client got and what Envoy logged:
over-budget OpenAI Chat, Responses and Anthropic Messages conversations,
requests that already fit, infeasible ones, malformed JSON, an unknown
model, a non-chat path, `stream: true`, and the sidecar stopped and
restarted on the same port.

Each check prints `ok NAME` or `FAIL NAME` with every problem it found; the
last line is `N passed, N failed`, and the exit status is non-zero on any
failure. Every process started is killed on exit; the run is bounded by
RUN_SECONDS.
"""

import http.client
import json
import os
import random
import shutil
import signal
import string
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bodies  # noqa: E402
import openai_count  # noqa: E402
import procs  # noqa: E402
import verify  # noqa: E402
from stub import Stub  # noqa: E402
from verify import Check  # noqa: E402

RUN_SECONDS = 150
READY_SECONDS = 30
REQUEST_SECONDS = 8
RESTART_SECONDS = 15
LOG_WAIT_SECONDS = 3
NOTHING_WAIT_SECONDS = 0.3

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"

GPT4O_WINDOW = 128000
CLAUDE_WINDOW = 200000


class Exchange:
    """One request through Envoy: what the client got, what the stub got."""

    def __init__(self, run, listener, test_id, path, body, status, headers, answer):
        self.run = run
        self.listener = listener
        self.test_id = test_id
        self.path = path
        self.body = body
        self.status = status
        self.headers = headers
        self.answer = answer
        self._log = None

    def upstream(self, wait=0.0):
        return self.run.stub.received(self.test_id, wait)

    def log(self):
        if self._log is None:
            self._log = self.run.access_log(self.test_id)
        return self._log

    def details(self):
        """The client's status and Envoy's word on it, for failure messages."""
        entry = self.log() or {}
        return (f"client got {self.status} {verify.short(self.answer, 100)!r} "
                f"(envoy: {entry.get('details')} {entry.get('flags')})")


class Run:
    def __init__(self, sidecar_binary, envoy_binary):
        self.sidecar_binary = os.path.abspath(sidecar_binary)
        self.envoy_binary = os.path.abspath(envoy_binary)
        self.dir = tempfile.mkdtemp(prefix="envoy-ext-proc-")
        self.access_log_path = os.path.join(self.dir, "access.log")
        self.results = []
        self.sequence = 0
        self.stub = None
        self.sidecar = None
        self.envoy = None
        self.ports = {}

    # --- reporting ------------------------------------------------------------------------------

    def record(self, c):
        self.results.append(c)
        if c.problems:
            print(f"FAIL {c.name}")
            for p in c.problems:
                print(f"     - {p}")
        else:
            print(f"ok   {c.name}")
        for n in c.notes:
            print(f"     note: {n}")
        sys.stdout.flush()

    def check(self, name, fn, *args):
        """Run `fn(check, *args)` as the named check; an exception is a
        problem of that check."""
        c = Check(name)
        try:
            fn(c, *args)
        except Exception as e:  # noqa: BLE001 - reported as the check's failure
            c.problems.append(f"raised {type(e).__name__}: {e}")
            if os.environ.get("ENVOY_TEST_TRACE"):
                traceback.print_exc()
        self.record(c)
        return not c.problems

    # --- processes ------------------------------------------------------------------------------

    def start(self):
        self.stub = Stub().start()
        self.ports = {
            "SIDECAR_PORT": procs.free_port(),
            "ADMIN_PORT": procs.free_port(),
            "BUFFERED_STRICT_PORT": procs.free_port(),
            "BUFFERED_OPEN_PORT": procs.free_port(),
            "DUPLEX_STRICT_PORT": procs.free_port(),
            "STUB_PORT": self.stub.port,
        }
        self.listeners = {
            "buffered": self.ports["BUFFERED_STRICT_PORT"],
            "buffered_open": self.ports["BUFFERED_OPEN_PORT"],
            "duplex": self.ports["DUPLEX_STRICT_PORT"],
        }
        with open(os.path.join(HERE, "bootstrap.yaml")) as f:
            template = string.Template(f.read())
        self.config_path = os.path.join(self.dir, "envoy.yaml")
        with open(self.config_path, "w") as f:
            f.write(template.substitute(self.ports, ACCESS_LOG=self.access_log_path))

        def validated(c):
            ok, out = procs.validate(self.envoy_binary, self.config_path)
            c.expect(ok, "envoy --mode validate refused the bootstrap:\n" + out[-2000:])

        if not self.check("envoy: the bootstrap validates", validated):
            return False

        self.sidecar = procs.Sidecar(self.sidecar_binary, self.ports["SIDECAR_PORT"],
                                     os.path.join(self.dir, "sidecar.log")).start()

        def serving(c):
            c.expect(self.sidecar.wait_serving(READY_SECONDS),
                     f"the sidecar is not SERVING within {READY_SECONDS} s:\n{self.sidecar.tail()}")

        if not self.check("sidecar: grpc.health.v1 says SERVING", serving):
            return False

        self.envoy = procs.Envoy(self.envoy_binary, self.config_path, self.ports["ADMIN_PORT"],
                                 os.path.join(self.dir, "envoy.log")).start()

        def ready(c):
            c.expect(self.envoy.wait_ready(READY_SECONDS),
                     f"envoy's /ready is not LIVE within {READY_SECONDS} s:\n{self.envoy.tail()}")

        return self.check("envoy: /ready says LIVE", ready)

    def stop(self):
        for p in (self.envoy, self.sidecar):
            if p is not None:
                p.stop(signal.SIGTERM, wait=5)
        if self.stub is not None:
            self.stub.stop()

    # --- requests -------------------------------------------------------------------------------

    def send(self, listener, path, body, headers=(), pieces=None, chunked=False, scenario="req"):
        """POST `body` through the named Envoy listener. The body goes out in
        several writes with short pauses (always on the full-duplex listener,
        so Envoy streams it in several chunks); `chunked` uses chunked
        transfer coding instead of content-length."""
        self.sequence += 1
        test_id = f"{scenario}-{listener}-{self.sequence}"
        if pieces is None:
            pieces = 4 if listener == "duplex" else 1
        conn = http.client.HTTPConnection("127.0.0.1", self.listeners[listener], timeout=REQUEST_SECONDS)
        try:
            conn.putrequest("POST", path, skip_accept_encoding=True)
            conn.putheader("content-type", "application/json")
            conn.putheader("x-test-id", test_id)
            for name, value in headers:
                conn.putheader(name, value)
            if chunked:
                conn.putheader("transfer-encoding", "chunked")
            else:
                conn.putheader("content-length", str(len(body)))
            conn.endheaders()
            step = max(1, -(-len(body) // pieces))
            for start in range(0, len(body), step):
                piece = body[start:start + step]
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                if pieces > 1:
                    time.sleep(0.02)
            if chunked:
                conn.send(b"0\r\n\r\n")
            response = conn.getresponse()
            answer = response.read()
            got = {k.lower(): v for k, v in response.getheaders()}
            return Exchange(self, listener, test_id, path, body, response.status, got, answer)
        except (OSError, http.client.HTTPException) as e:
            return Exchange(self, listener, test_id, path, body, None, {}, f"{type(e).__name__}: {e}".encode())
        finally:
            conn.close()

    def access_log(self, test_id):
        """The access log entry of `test_id` (a dict), waiting for Envoy to
        write it; None if it never comes."""
        deadline = time.monotonic() + LOG_WAIT_SECONDS
        needle = json.dumps(test_id)
        while True:
            try:
                with open(self.access_log_path) as f:
                    for line in f:
                        if needle in line:
                            return json.loads(line)
            except OSError:
                pass
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)


# --- what every fitted or unchanged chat request carries ------------------------------------------


def one_upstream(c, ex):
    """The single request the stub received for `ex`, or None (a problem)."""
    if not c.expect(ex.status == 200, f"expected 200 from the stub; {ex.details()}"):
        return None
    got = ex.upstream()
    if not c.expect(len(got) == 1, f"the upstream received {len(got)} requests (expected 1)"):
        return None
    return got[0]


def check_length_header(c, ex, up):
    """A content-length upstream equals the body's length. Without one the
    body comes chunked: always in full duplex (Envoy drops content-length
    there, whatever the processor sets), and on a buffered listener only for
    a chunked client's unchanged body (a changed one gets the new length)."""
    length = up.headers.get("content-length")
    if length is not None:
        c.expect(int(length) == len(up.body), f"content-length {length} but the upstream body has {len(up.body)} bytes")
        return
    c.expect(up.chunked, "neither content-length nor chunked transfer coding upstream")
    c.expect(ex.listener == "duplex" or up.body == ex.body,
             "a buffered request whose body changed has no content-length (expected the new body's length)")


def metric(value):
    """A dynamic metadata number from the access log (a JSON number or its
    text), or None."""
    if value is None or value == "-" or isinstance(value, bool):
        return None
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def text_only(items):
    """"true" for a text conversation (the sidecar's counts are exact for
    gpt-4o there), None (either answer) once tool calls or reasoning items
    are in it."""
    for m in items:
        if m.get("tool_calls") or m.get("role") == "tool" or m.get("type") in (
                "function_call", "function_call_output", "reasoning"):
            return None
    return "true"


def check_headers_and_metadata(c, ex, up, budget, exact, cut):
    """The x-context-assembler-* headers for the upstream, and the dynamic
    metadata in the access log. `exact` is the x-context-assembler-exact
    expected, None for either. Returns the header's token count and its
    exact flag."""
    tokens = up.headers.get("x-context-assembler-input-tokens")
    n = None
    if c.expect(tokens is not None, "no x-context-assembler-input-tokens header upstream"):
        try:
            n = int(tokens)
            c.expect(n <= budget, f"x-context-assembler-input-tokens {n} is over the budget {budget}")
        except ValueError:
            c.expect(False, f"x-context-assembler-input-tokens is not a number: {tokens!r}")
    flag = up.headers.get("x-context-assembler-exact")
    c.expect(flag == exact if exact else flag in ("true", "false"),
             f"x-context-assembler-exact is {flag!r}, expected {exact or 'true or false'!r}")
    check_length_header(c, ex, up)
    entry = ex.log()
    if not c.expect(entry is not None, "no access log entry"):
        return n, flag
    c.expect(metric(entry.get("input_tokens")) == n and n is not None,
             f"metadata input_tokens is {entry.get('input_tokens')!r}, the header says {tokens!r}")
    c.expect(isinstance(entry.get("prefix_hash"), str) and entry.get("prefix_hash") not in ("", "-"),
             f"metadata prefix_hash is {entry.get('prefix_hash')!r}")
    turns_cut = metric(entry.get("turns_cut"))
    cleared = metric(entry.get("results_cleared"))
    c.expect(turns_cut is not None, f"metadata turns_cut is {entry.get('turns_cut')!r}")
    c.expect(cleared is not None, f"metadata results_cleared is {entry.get('results_cleared')!r}")
    if cut and turns_cut is not None and cleared is not None:
        c.expect(turns_cut + cleared > 0, "metadata says nothing was cut or cleared from an over-budget request")
    if not cut:
        c.expect(turns_cut == 0 and cleared == 0,
                 f"metadata says turns_cut {turns_cut}, results_cleared {cleared} for a request that fits")
    return n, flag


def recount(c, up_body, budget, header):
    """Recount a Chat body with tiktoken: within the budget. A difference
    from the sidecar's header (its count, its exact flag) is a problem when
    the sidecar says its count is exact, a note otherwise."""
    n = openai_count.chat_tokens(up_body)
    c.expect(n <= budget, f"tiktoken counts the upstream body at {n} tokens, over the budget {budget}")
    tokens, flag = header
    if tokens is not None and tokens != n:
        text = (f"tiktoken recount {n} != x-context-assembler-input-tokens {tokens} (difference {tokens - n:+d}; "
                f"tools alone count {openai_count.tools_tokens(up_body.get('tools'))})")
        if flag == "true":
            c.expect(False, text + " although x-context-assembler-exact is true")
        else:
            c.note(text)
    return n


def expect_exact_passthrough(c, ex, *, allow=None):
    """The upstream received the client's exact bytes (after undoing the
    allowed additions, `allow(body) -> body`, when given)."""
    up = one_upstream(c, ex)
    if up is None:
        return None
    body = allow(up.body) if allow else up.body
    if body != ex.body:
        at = first_difference(body, ex.body)
        c.expect(False, f"the upstream body differs from the client's{' beyond the allowed additions' if allow else ''}"
                 f": sent {len(ex.body)} bytes, upstream {len(up.body)}; from byte {at} the client has "
                 f"{ex.body[max(0, at - 20):at + 60]!r}, the upstream {body[max(0, at - 20):at + 60]!r}")
    c.expect(up.path == ex.path, f"the upstream path is {up.path}, the client's {ex.path}")
    check_length_header(c, ex, up)
    return up


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def without_added_cache_key(body):
    import jsonspan

    try:
        root = jsonspan.parse(body)
    except ValueError:
        return body
    cut = jsonspan.without_member(root, verify.ADDED_OPENAI)
    return body if cut is None else body[:root.start] + cut + body[root.end:]


def without_added_markers(body):
    import jsonspan

    try:
        root = jsonspan.parse(body)
    except ValueError:
        return body
    return body[:root.start] + verify.strip_markers(root) + body[root.end:]


# --- scenarios ------------------------------------------------------------------------------------


def over_budget_chat(run, mode, budget=2000, stream=False, agent_tail=False):
    """An over-budget Chat conversation (ending in a user message, or with
    `agent_tail` in an assistant call and its two results); with `stream`
    it carries `stream: true` and goes out with chunked transfer coding."""
    rng = random.Random(f"chat-{mode}-{stream}-{agent_tail}")
    msgs = bodies.chat_messages(rng, turns=16, agent_tail=agent_tail)
    extra = [("stream", b"true"), ("stream_options", b'{ "include_usage" : true }')] if stream else []
    body, msgs_raw = bodies.chat_body(rng, msgs, extra=extra)
    variant = " with stream: true" if stream else " ending in tool results" if agent_tail else ""
    name = f"{mode}: OpenAI Chat over budget{variant} is fitted"
    ex = run.send(mode, CHAT, body, headers=[("x-context-budget", str(budget)), ("x-session-id", f"s-{mode}")],
                  chunked=stream, scenario="chat")

    def checks(c):
        client_tokens = openai_count.chat_tokens(json.loads(body))
        c.expect(client_tokens > budget, f"test precondition: the client body counts {client_tokens} <= {budget}")
        up = one_upstream(c, ex)
        if up is None:
            return
        c.expect(up.path == CHAT, f"upstream path {up.path}")
        header = check_headers_and_metadata(c, ex, up, budget, text_only(msgs), cut=True)
        parsed = verify.check_chat(c, body, msgs_raw, up.body, n_newest=3 if agent_tail else 1)
        if parsed is not None:
            recount(c, parsed, budget, header)

    run.check(name, checks)


def over_budget_responses(run, mode, budget=2000):
    rng = random.Random(f"responses-{mode}")
    items = bodies.responses_items(rng, turns=16)
    body, items_raw = bodies.responses_body(rng, items)
    ex = run.send(mode, RESPONSES, body, headers=[("x-context-budget", str(budget))], scenario="responses")

    def checks(c):
        up = one_upstream(c, ex)
        if up is None:
            return
        check_headers_and_metadata(c, ex, up, budget, text_only(items), cut=True)
        verify.check_responses(c, body, items_raw, up.body)

    run.check(f"{mode}: OpenAI Responses over budget is fitted", checks)


def over_budget_anthropic(run, mode, budget=2500):
    rng = random.Random(f"anthropic-{mode}")
    msgs = bodies.anthropic_messages(rng, turns=16)
    body, msgs_raw = bodies.anthropic_body(rng, msgs)
    ex = run.send(mode, MESSAGES, body, headers=[("x-context-budget", str(budget)),
                                                 ("anthropic-version", "2023-06-01")], scenario="anthropic")

    def checks(c):
        up = one_upstream(c, ex)
        if up is None:
            return
        check_headers_and_metadata(c, ex, up, budget, "false", cut=True)
        verify.check_anthropic(c, body, msgs_raw, up.body)

    run.check(f"{mode}: Anthropic Messages over budget is fitted", checks)


def fits(run, mode):
    rng = random.Random(f"fits-{mode}")
    text_msgs = bodies.chat_messages(rng, turns=3, words=20, tool_turns=False)

    # OpenAI Chat, a text conversation with tools and its own prompt_cache_key:
    # nothing to add, so exact bytes, and an exact count.
    body, _ = bodies.chat_body(rng, text_msgs, extra=[("prompt_cache_key", b'"tenant\\/42"')])
    ex = run.send(mode, CHAT, body, scenario="fits-chat-key")

    def chat_exact(c):
        up = expect_exact_passthrough(c, ex)
        if up is not None:
            header = check_headers_and_metadata(c, ex, up, GPT4O_WINDOW - 512, "true", cut=False)
            recount(c, json.loads(up.body), GPT4O_WINDOW - 512, header)

    run.check(f"{mode}: OpenAI Chat text conversation that fits (own prompt_cache_key) arrives byte for byte, "
              "counted exactly", chat_exact)

    # With tool calls and without a prompt_cache_key: the same bytes once an
    # added prompt_cache_key is cut out.
    agent_msgs = bodies.chat_messages(rng, turns=3, words=20)
    body2, _ = bodies.chat_body(rng, agent_msgs)
    ex2 = run.send(mode, CHAT, body2, scenario="fits-chat")

    def chat_added(c):
        up = expect_exact_passthrough(c, ex2, allow=without_added_cache_key)
        if up is not None:
            header = check_headers_and_metadata(c, ex2, up, GPT4O_WINDOW - 512, None, cut=False)
            recount(c, json.loads(up.body), GPT4O_WINDOW - 512, header)

    run.check(f"{mode}: OpenAI Chat that fits arrives byte for byte but an added prompt_cache_key", chat_added)

    # Responses, a text conversation with its own prompt_cache_key.
    items = bodies.responses_items(rng, turns=2, words=20, tool_turns=False)
    body3, _ = bodies.responses_body(rng, items, extra=[("prompt_cache_key", b'"k-1"')])
    ex3 = run.send(mode, RESPONSES, body3, scenario="fits-responses")

    def responses_exact(c):
        up = expect_exact_passthrough(c, ex3)
        if up is not None:
            check_headers_and_metadata(c, ex3, up, GPT4O_WINDOW - 800, text_only(items), cut=False)

    run.check(f"{mode}: OpenAI Responses that fits (own prompt_cache_key) arrives byte for byte", responses_exact)

    # Anthropic with four cache_control markers of its own: none may be added.
    marker = {"type": "ephemeral"}
    system = [{"type": "text", "text": "Be brief. " + bodies.prose(rng, 30), "cache_control": marker}]
    tools = [dict(t) for t in bodies.ANTHROPIC_TOOLS]
    tools[-1]["cache_control"] = marker
    msgs = bodies.anthropic_messages(rng, turns=3, words=20)
    msgs[0] = {"role": "user", "content": [{"type": "text", "text": "hello " + bodies.prose(rng, 10),
                                             "cache_control": marker}]}
    msgs[-1] = {"role": "user", "content": [{"cache_control": marker, "text": "and now?", "type": "text"}]}
    body4, _ = bodies.anthropic_body(rng, msgs, system=system, tools=tools)
    ex4 = run.send(mode, MESSAGES, body4, scenario="fits-anthropic-markers")

    def anthropic_exact(c):
        up = expect_exact_passthrough(c, ex4)
        if up is not None:
            check_headers_and_metadata(c, ex4, up, CLAUDE_WINDOW - 1024, "false", cut=False)

    run.check(f"{mode}: Anthropic Messages that fits (4 own cache_control) arrives byte for byte", anthropic_exact)

    # Anthropic without markers: the same bytes once added markers are cut out.
    body5, _ = bodies.anthropic_body(rng, bodies.anthropic_messages(rng, turns=3, words=20))
    ex5 = run.send(mode, MESSAGES, body5, scenario="fits-anthropic")

    def anthropic_added(c):
        up = expect_exact_passthrough(c, ex5, allow=without_added_markers)
        if up is not None:
            import jsonspan

            n = verify.count_markers(jsonspan.parse(up.body))
            c.expect(n <= 4, f"{n} cache_control markers added (at most 4)")
            check_headers_and_metadata(c, ex5, up, CLAUDE_WINDOW - 1024, "false", cut=False)

    run.check(f"{mode}: Anthropic Messages that fits arrives byte for byte but added cache_control", anthropic_added)


def infeasible(run, mode):
    rng = random.Random(f"infeasible-{mode}")
    msgs = [{"role": "system", "content": bodies.prose(rng, 600)}, {"role": "user", "content": "hi"}]
    body, _ = bodies.chat_body(rng, msgs)
    ex = run.send(mode, CHAT, body, headers=[("x-context-budget", "300")], scenario="infeasible-chat")

    def openai(c):
        c.expect(ex.status == 400, f"expected 400 from Envoy; {ex.details()}")
        try:
            answer = json.loads(ex.answer)
            err = answer["error"]
            c.expect(set(answer) == {"error"}, f"top-level keys {sorted(answer)}")
            c.expect(isinstance(err.get("message"), str) and err["message"], "error.message is empty")
            c.expect(err.get("type") == "invalid_request_error", f"error.type is {err.get('type')!r}")
            c.expect(err.get("param") == "messages", f"error.param is {err.get('param')!r}")
            c.expect(err.get("code") == "context_length_exceeded", f"error.code is {err.get('code')!r}")
        except (ValueError, KeyError, TypeError, AttributeError):
            c.expect(False, f"the answer is not OpenAI's error shape: {verify.short(ex.answer)!r}")
        got = ex.upstream(wait=NOTHING_WAIT_SECONDS)
        c.expect(not got, f"the upstream received {len(got)} requests (expected none)")

    run.check(f"{mode}: OpenAI Chat that cannot fit gets 400 context_length_exceeded", openai)

    system = [{"type": "text", "text": bodies.prose(rng, 600)}]
    body2, _ = bodies.anthropic_body(rng, [{"role": "user", "content": "hi"}], system=system)
    ex2 = run.send(mode, MESSAGES, body2, headers=[("x-context-budget", "300")], scenario="infeasible-anthropic")

    def anthropic(c):
        c.expect(ex2.status == 400, f"expected 400 from Envoy; {ex2.details()}")
        try:
            answer = json.loads(ex2.answer)
            c.expect(answer.get("type") == "error", f"type is {answer.get('type')!r}")
            err = answer["error"]
            c.expect(err.get("type") == "invalid_request_error", f"error.type is {err.get('type')!r}")
            c.expect(isinstance(err.get("message"), str) and err["message"], "error.message is empty")
        except (ValueError, KeyError, TypeError, AttributeError):
            c.expect(False, f"the answer is not Anthropic's error shape: {verify.short(ex2.answer)!r}")
        got = ex2.upstream(wait=NOTHING_WAIT_SECONDS)
        c.expect(not got, f"the upstream received {len(got)} requests (expected none)")

    run.check(f"{mode}: Anthropic Messages that cannot fit gets 400 invalid_request_error", anthropic)


def passthrough(run, mode):
    """Requests the sidecar must not touch: the upstream gets the client's
    exact bytes. The budget header is low so that touching them would show."""
    rng = random.Random(f"passthrough-{mode}")
    low = [("x-context-budget", "200")]
    big, _ = bodies.chat_body(rng, bodies.chat_messages(rng, turns=6))
    cases = [
        ("malformed JSON", CHAT, big[: len(big) // 2]),
        ("an unknown model", CHAT, bodies.chat_body(rng, bodies.chat_messages(rng, turns=6), model="no-such-model-7")[0]),
        ("a non-chat path (/v1/embeddings)", "/v1/embeddings", big),
        ("an Anthropic body with an unknown model", MESSAGES,
         bodies.anthropic_body(rng, bodies.anthropic_messages(rng, turns=6), model="mystery-model")[0]),
    ]
    for label, path, body in cases:
        ex = run.send(mode, path, body, headers=low, scenario="passthrough")
        run.check(f"{mode}: {label} passes through untouched", lambda c, ex=ex: expect_exact_passthrough(c, ex))


def sidecar_down_and_back(run):
    """Kill the sidecar: the failure_mode_allow=true listener forwards the
    client's bytes unchanged, the strict ones answer 5xx and forward nothing.
    Restart it on the same port: Envoy reconnects and fitting works again."""
    rng = random.Random("down")
    body, msgs_raw = bodies.chat_body(rng, bodies.chat_messages(rng, turns=16))
    budget = 2000
    headers = [("x-context-budget", str(budget))]
    run.sidecar.stop(signal.SIGKILL)

    ex = run.send("buffered_open", CHAT, body, headers=headers, scenario="down-open")
    run.check("sidecar down: the failure_mode_allow=true listener forwards the client's bytes",
              lambda c: expect_exact_passthrough(c, ex))
    for mode in ("buffered", "duplex"):
        exs = run.send(mode, CHAT, body, headers=headers, scenario="down-strict")

        def strict(c, exs=exs):
            c.expect(exs.status is not None and 500 <= exs.status < 600, f"expected a 5xx from Envoy; {exs.details()}")
            got = exs.upstream(wait=NOTHING_WAIT_SECONDS)
            c.expect(not got, f"the upstream received {len(got)} requests (expected none)")

        run.check(f"sidecar down: the {mode} failure_mode_allow=false listener answers 5xx", strict)

    connections = run.envoy.counter("cluster.sidecar.upstream_cx_total") or 0
    run.sidecar.start()

    def restarted(c):
        c.expect(run.sidecar.wait_serving(READY_SECONDS),
                 f"the sidecar restarted on port {run.sidecar.port} is not SERVING:\n{run.sidecar.tail()}")

    if not run.check("sidecar restarted on the same port: SERVING", restarted):
        return
    # Envoy reconnects on the next request; allow a few tries, bounded.
    deadline = time.monotonic() + RESTART_SECONDS
    while True:
        exr = run.send("buffered", CHAT, body, headers=headers, scenario="restarted")
        got = exr.upstream()
        fitted = exr.status == 200 and got and "x-context-assembler-input-tokens" in got[0].headers
        if fitted or time.monotonic() > deadline:
            break
        time.sleep(0.5)

    def reconnected(c):
        now = run.envoy.counter("cluster.sidecar.upstream_cx_total") or 0
        c.expect(now > connections, f"Envoy opened no new connection to the sidecar (upstream_cx_total {now})")
        c.expect((run.envoy.counter("cluster.sidecar.upstream_cx_active") or 0) >= 1,
                 "Envoy holds no connection to the restarted sidecar")

    run.check("sidecar restarted: Envoy reconnects to it", reconnected)

    def fitted_again(c):
        up = one_upstream(c, exr)
        if up is None:
            return
        header = check_headers_and_metadata(c, exr, up, budget, None, cut=True)
        parsed = verify.check_chat(c, body, msgs_raw, up.body)
        if parsed is not None:
            recount(c, parsed, budget, header)

    run.check("sidecar restarted: an over-budget OpenAI Chat is fitted again through Envoy", fitted_again)


def stub_self_check(run):
    """The stub itself: a chunked request straight to it is recorded byte
    for byte (the full-duplex listener's upstream requests come chunked)."""
    body = b'{"x" : "\\u00e9"}' * 50
    conn = http.client.HTTPConnection("127.0.0.1", run.stub.port, timeout=REQUEST_SECONDS)
    try:
        conn.putrequest("POST", "/direct")
        conn.putheader("x-test-id", "stub-self")
        conn.putheader("transfer-encoding", "chunked")
        conn.endheaders()
        for start in range(0, len(body), 300):
            piece = body[start:start + 300]
            conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        conn.send(b"0\r\n\r\n")
        status = conn.getresponse().status
    finally:
        conn.close()

    def recorded(c):
        c.expect(status == 200, f"the stub answered {status}")
        got = run.stub.received("stub-self")
        c.expect(len(got) == 1 and got[0].body == body and got[0].chunked, "the stub did not record the body")

    run.check("stub: records a chunked request byte for byte", recorded)


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 64
    run = Run(sys.argv[1], sys.argv[2])

    def out_of_time(*_):
        raise TimeoutError(f"the run took over {RUN_SECONDS} s")

    signal.signal(signal.SIGALRM, out_of_time)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.alarm(RUN_SECONDS)
    started = time.monotonic()
    try:
        if run.start():
            stub_self_check(run)
            for mode in ("buffered", "duplex"):
                over_budget_chat(run, mode)
                over_budget_chat(run, mode, stream=True)
                over_budget_chat(run, mode, agent_tail=True)
                over_budget_responses(run, mode)
                over_budget_anthropic(run, mode)
                fits(run, mode)
                infeasible(run, mode)
                passthrough(run, mode)
            sidecar_down_and_back(run)
    except BaseException as e:  # noqa: BLE001 - the run's own failure, counted
        c = Check("the run completes")
        c.problems.append(f"{type(e).__name__}: {e}")
        run.record(c)
    finally:
        signal.alarm(0)
        run.stop()
    failed = [c for c in run.results if c.problems]
    if failed:
        for p in (run.sidecar, run.envoy):
            if p is not None:
                print(f"--- last lines of {p.name}'s log ({p.log_path}):\n{p.tail()}")
    notes = sum(len(c.notes) for c in run.results)
    if failed:
        print(f"envoy ext_proc: {time.monotonic() - started:.1f} s, {notes} notes, logs in {run.dir}")
    else:
        shutil.rmtree(run.dir, ignore_errors=True)
        print(f"envoy ext_proc: {time.monotonic() - started:.1f} s, {notes} notes")
    print(f"{len(run.results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
