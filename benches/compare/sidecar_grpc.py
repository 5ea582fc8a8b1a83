"""Path (c): the sidecar, called through the Python gRPC client (the stubs checked in to the client
package, clients/python).

The requests are parsed from the same JSON lines with `google.protobuf.json_format.Parse` before any
timing. The kept ids come from the response's decision report (`decisions[].kept_item_ids`,
`compacted_item_ids`, `summarized_item_ids`, and of the turns kept, `cleared_item_ids` and
`thinking_dropped_item_ids`), the total from `usage.total_tokens`; each message's thinking is kept
with it for the recount.

Ways of calling it: one synchronous `Assemble` after another on one channel; a thread pool of
`concurrency` threads sharing one channel; `grpc.aio` with `concurrency` calls in flight; and, as an
extra, synchronous `AssembleBatch` calls of `batch` requests each (a request's latency is then its
batch's).
"""

import asyncio
import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from common import ROOT, Result

sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
from context_assembler.v1 import assembler_pb2 as pb  # noqa: E402
from context_assembler.v1 import assembler_pb2_grpc as pb_grpc  # noqa: E402

NAME = "(c) sidecar gRPC"
TIMEOUT_SECS = 30
_ROLE = {pb.ROLE_SYSTEM: "system", pb.ROLE_USER: "user", pb.ROLE_ASSISTANT: "assistant", pb.ROLE_TOOL: "tool"}
# One channel's HTTP/2 windows sized like examples/replay.rs, messages up to 64 MiB.
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
]


class Sidecar:
    """A sidecar process started on 127.0.0.1:0 with metrics off; stopped by `close`."""

    def __init__(self, binary: str):
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "off", "--log-format", "json",
             "--memory-store", "off"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.addr = None
        for line in self.proc.stderr:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("message") == "gRPC listening":
                self.addr = event.get("addr") or event.get("fields", {}).get("addr")
                break
        if self.addr is None:
            self.close()
            raise SystemExit(f"{binary} exited before listening")
        # Keep draining stderr so the child never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_serving(addr: str, seconds: float = 30.0):
    """Polls grpc.health.v1 until SERVING (NOT_SERVING while the vocabularies load)."""
    deadline = time.monotonic() + seconds
    with grpc.insecure_channel(addr) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                if health.Check(health_pb2.HealthCheckRequest(), timeout=2).status == \
                        health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"the sidecar at {addr} is not SERVING after {seconds} s")
            time.sleep(0.05)


def parse(requests) -> list:
    """The wire requests, parsed from the JSON lines ((line, dict) pairs)."""
    return [json_format.Parse(line, pb.AssembleRequest()) for line, _ in requests]


def result(resp, seconds: float) -> Result:
    evidence, turns, summarized, cleared, thinking_dropped = {}, [], [], [], []
    for d in resp.decisions:
        if d.kind == pb.BLOCK_KIND_EVIDENCE:
            compacted = set(d.compacted_item_ids)
            evidence.update({i: "compact" if i in compacted else "full" for i in d.kept_item_ids})
        elif d.kind in (pb.BLOCK_KIND_HISTORY, pb.BLOCK_KIND_RECENT_TURNS):
            turns.extend(d.kept_item_ids)
            summarized.extend(d.summarized_item_ids)
            cleared.extend(d.cleared_item_ids)
            thinking_dropped.extend(d.thinking_dropped_item_ids)
    return Result(
        request_id=resp.request_id,
        budget=resp.usage.budget,
        messages=[(_ROLE[m.role], m.content, tuple(t.text for t in m.thinking if not t.redacted))
                  for m in resp.messages],
        evidence=evidence,
        turns=turns,
        reported_tokens=resp.usage.total_tokens,
        seconds=seconds,
        summarized=summarized,
        model=resp.model,
        cleared=cleared,
        thinking_dropped=thinking_dropped,
    )


def _timed_call(stub, req):
    started = time.perf_counter()
    resp = stub.Assemble(req, timeout=TIMEOUT_SECS)
    return resp, time.perf_counter() - started


def run_sync(addr: str, wire: list) -> list:
    """One synchronous call after another on one channel."""
    with grpc.insecure_channel(addr, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.AssemblerStub(channel)
        timed = [_timed_call(stub, req) for req in wire]
    return [result(resp, s) for resp, s in timed]


def run_threads(addr: str, wire: list, concurrency: int) -> list:
    """`concurrency` threads sharing one channel (the GIL serialises the Python side)."""
    with grpc.insecure_channel(addr, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.AssemblerStub(channel)
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            timed = list(pool.map(lambda req: _timed_call(stub, req), wire))
    return [result(resp, s) for resp, s in timed]


async def _run_aio(addr: str, wire: list, concurrency: int) -> list:
    timed = [None] * len(wire)
    async with grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.AssemblerStub(channel)
        next_index = iter(range(len(wire)))

        async def worker():
            for i in next_index:
                started = time.perf_counter()
                resp = await stub.Assemble(wire[i], timeout=TIMEOUT_SECS)
                timed[i] = (resp, time.perf_counter() - started)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return [result(resp, s) for resp, s in timed]


def run_aio(addr: str, wire: list, concurrency: int) -> list:
    """`grpc.aio` with `concurrency` calls in flight on one channel."""
    return asyncio.run(_run_aio(addr, wire, concurrency))


def run_batch(addr: str, wire: list, batch: int) -> list:
    """Synchronous `AssembleBatch` calls of `batch` requests each, one after another."""
    out = []
    with grpc.insecure_channel(addr, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.AssemblerStub(channel)
        for i in range(0, len(wire), batch):
            started = time.perf_counter()
            resp = stub.AssembleBatch(pb.AssembleBatchRequest(requests=wire[i:i + batch]), timeout=TIMEOUT_SECS)
            seconds = time.perf_counter() - started
            for r in resp.results:
                if r.WhichOneof("result") != "response":
                    raise SystemExit(f"AssembleBatch refused a request: {r.error.message}")
                out.append(result(r.response, seconds))
    return out


def run_floor_rpc(addr: str, n: int) -> list:
    """The per-call floor of this client: `n` synchronous CountTokens calls of a 2-byte text."""
    out = []
    with grpc.insecure_channel(addr, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.AssemblerStub(channel)
        req = pb.CountTokensRequest(model="gpt-4o", text="hi")
        for _ in range(n):
            started = time.perf_counter()
            stub.CountTokens(req, timeout=TIMEOUT_SECS)
            out.append(Result("", 0, [], {}, [], 0, seconds=time.perf_counter() - started))
    return out


def run_floor_codec(wire: list, responses: list) -> list:
    """The client-side protobuf work alone, no RPC: encode each request, decode its response."""
    encoded = [r.SerializeToString() for r in responses]
    out = []
    for req, resp in zip(wire, encoded):
        started = time.perf_counter()
        req.SerializeToString()
        pb.AssembleResponse.FromString(resp)
        out.append(Result("", 0, [], {}, [], 0, seconds=time.perf_counter() - started))
    return out


def fetch(addr: str, wire: list) -> list:
    """The raw responses (for the codec floor)."""
    with grpc.insecure_channel(addr, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.AssemblerStub(channel)
        return [stub.Assemble(req, timeout=TIMEOUT_SECS) for req in wire]
