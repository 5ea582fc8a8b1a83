"""Connect to the sidecar with sensible defaults, wait until it is ready, and decode its errors.

`connect` opens a channel with keepalive, a service config that retries UNAVAILABLE, and message
size limits matching the sidecar's defaults (and, to a Unix socket, the authority `localhost`),
and returns it with an `AssemblerStub`. `wait_ready` waits for `grpc.health.v1` to say SERVING
(the sidecar is NOT_SERVING while its tokenizers load).
`error_details` turns a failed call's `grpc.RpcError`, or a batch or stream `RequestError`, into
one `ErrorDetails` holding the typed rich details: `google.rpc.BadRequest`, `ErrorInfo`,
`RetryInfo` and the sidecar's own `BudgetOverflowDetail`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from context_assembler.v1 import assembler_pb2, assembler_pb2_grpc

__all__ = [
    "DEFAULT_SERVICE_CONFIG",
    "ERROR_DOMAIN",
    "Connection",
    "ErrorDetails",
    "connect",
    "error_details",
    "wait_ready",
]

#: The `ErrorInfo.domain` of every error the sidecar answers.
ERROR_DOMAIN = "context-assembler"

#: The gRPC service every RPC of the contract belongs to.
SERVICE = "context_assembler.v1.Assembler"

#: Retries of UNAVAILABLE (a sidecar restarting or draining, a memory store briefly out of
#: reach): at most 4 attempts, backing off from 0.1 s to 2 s. Nothing else is retried: every
#: other error would answer the same again. Retain is idempotent by its key, so a retry that
#: reaches a call already stored replays it.
DEFAULT_SERVICE_CONFIG: Mapping[str, Any] = {
    "methodConfig": [
        {
            "name": [{"service": SERVICE}],
            "retryPolicy": {
                "maxAttempts": 4,
                "initialBackoff": "0.1s",
                "maxBackoff": "2s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }
    ]
}

#: Keepalive pings on a connection with calls open, as often as the sidecar's own (30 s, 10 s
#: to answer), so a dead peer behind a proxy is found in seconds, not at the next call.
KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 10_000
#: The sidecar's default request limit (`limits.max_request_bytes`, 4 MiB): a larger request
#: is refused locally instead of being uploaded first.
DEFAULT_MAX_SEND_BYTES = 4 << 20
#: The sidecar's default response limit (8 bytes per request byte, at least 16 MiB).
DEFAULT_MAX_RECEIVE_BYTES = 32 << 20

#: The `:authority` sent over a Unix socket ("unix:" targets). grpcio sends the socket's path by
#: default, which is no URI authority: the sidecar's HTTP/2 server (Rust's h2) resets every such
#: call with RST_STREAM PROTOCOL_ERROR.
UNIX_AUTHORITY = "localhost"

#: The pause before watching health again after a watch ended early.
_WATCH_RETRY_SECS = 0.1

_CODES = {code.value[0]: code for code in grpc.StatusCode}


@dataclass
class Connection:
    """An open channel to the sidecar and its stub. Close it, or use it as a context manager."""

    channel: grpc.Channel
    stub: assembler_pb2_grpc.AssemblerStub

    def close(self) -> None:
        """Closes the channel; calls in flight are cancelled."""
        self.channel.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def connect(
    target: str,
    *,
    tls: bool | grpc.ChannelCredentials | None = None,
    service_config: Mapping[str, Any] | None = DEFAULT_SERVICE_CONFIG,
    max_send_bytes: int = DEFAULT_MAX_SEND_BYTES,
    max_receive_bytes: int = DEFAULT_MAX_RECEIVE_BYTES,
    options: Sequence[tuple[str, Any]] = (),
) -> Connection:
    """Opens a channel to the sidecar at `target` ("host:port", or "unix:/path" for a Unix socket).

    `tls`: None or False for plaintext (a sidecar beside its gateway in the pod); True for TLS
    with the system's roots; or `grpc.ChannelCredentials` (mutual TLS:
    `grpc.ssl_channel_credentials(root, key, chain)`). `service_config`: the retry policy
    (`DEFAULT_SERVICE_CONFIG`); None disables it. A "unix:" target is sent the authority
    `UNIX_AUTHORITY` ("localhost"), which the sidecar accepts, not the socket's path, which it
    refuses. `options` are added last, so they override the defaults. Connecting is lazy: call
    `wait_ready` to wait for the sidecar.
    """
    channel_options: list[tuple[str, Any]] = [
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.max_send_message_length", max_send_bytes),
        ("grpc.max_receive_message_length", max_receive_bytes),
    ]
    if target.startswith("unix:"):
        channel_options.append(("grpc.default_authority", UNIX_AUTHORITY))
    if service_config is not None:
        channel_options += [
            ("grpc.enable_retries", 1),
            ("grpc.service_config", json.dumps(service_config)),
        ]
    channel_options += list(options)
    if tls is None or tls is False:
        channel = grpc.insecure_channel(target, options=channel_options)
    else:
        credentials = grpc.ssl_channel_credentials() if tls is True else tls
        channel = grpc.secure_channel(target, credentials, options=channel_options)
    return Connection(channel=channel, stub=assembler_pb2_grpc.AssemblerStub(channel))


def wait_ready(channel: grpc.Channel, timeout: float) -> None:
    """Waits up to `timeout` seconds for the sidecar's health (`grpc.health.v1`, the server as a
    whole) to be SERVING, connecting first if need be.

    Raises TimeoutError naming the last status seen (NOT_SERVING while tokenizers load, or the
    connection's error) when it is not SERVING in time.
    """
    health = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + timeout
    last = "no answer"
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            # Watch answers the status now and on every change: no polling while it loads.
            for answer in health.Watch(health_pb2.HealthCheckRequest(), timeout=remaining, wait_for_ready=True):
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                last = f"{err.code().name}: {err.details()}"
        # The watch ended early (the sidecar restarted or drained): watch again after a pause.
        time.sleep(min(_WATCH_RETRY_SECS, max(0.0, deadline - time.monotonic())))
    raise TimeoutError(f"the sidecar was not SERVING after {timeout}s (last: {last})")


@dataclass(frozen=True)
class ErrorDetails:
    """A failed call's status and its rich details, each None when the error carried none.

    `budget_overflow` comes with a FAILED_PRECONDITION of reason BUDGET_OVERFLOW; `retry_info`
    with OVERLOADED and MEMORY_UNAVAILABLE; `bad_request` with every INVALID_ARGUMENT. `other`
    holds details of types this package does not know, still packed.
    """

    code: grpc.StatusCode
    message: str
    bad_request: error_details_pb2.BadRequest | None = None
    error_info: error_details_pb2.ErrorInfo | None = None
    retry_info: error_details_pb2.RetryInfo | None = None
    budget_overflow: assembler_pb2.BudgetOverflowDetail | None = None
    other: tuple[any_pb2.Any, ...] = field(default_factory=tuple)

    @property
    def reason(self) -> str:
        """`ErrorInfo.reason` (such as "BUDGET_OVERFLOW"), or "" without an ErrorInfo."""
        return self.error_info.reason if self.error_info is not None else ""

    @property
    def metadata(self) -> Mapping[str, str]:
        """`ErrorInfo.metadata` (such as `limit` and `value`), empty without an ErrorInfo."""
        return dict(self.error_info.metadata) if self.error_info is not None else {}

    @property
    def fields(self) -> list[str]:
        """The fields `BadRequest` names (such as "model" or "blocks[2].items[0].id"), in order."""
        if self.bad_request is None:
            return []
        return [violation.field for violation in self.bad_request.field_violations]

    @property
    def retry_delay(self) -> float | None:
        """Seconds `RetryInfo` asks to wait before retrying, or None without one."""
        if self.retry_info is None:
            return None
        return self.retry_info.retry_delay.ToTimedelta().total_seconds()


def error_details(error: grpc.RpcError | assembler_pb2.RequestError | status_pb2.Status) -> ErrorDetails:
    """Decodes the details of a failed call (`grpc.RpcError`), of one request of a batch or
    stream (`RequestError`, whose `status_details` is an encoded `google.rpc.Status`), or of a
    `google.rpc.Status` itself.

    An error without details still answers its code and message. Raises ValueError when the
    encoded status contradicts the call's code or message (it is not this call's).
    """
    if isinstance(error, assembler_pb2.RequestError):
        status = status_pb2.Status()
        if error.status_details:
            status.ParseFromString(error.status_details)
        else:
            status.code, status.message = error.code, error.message
        if status.code != error.code:
            raise ValueError(f"status_details has code {status.code}, the error {error.code}")
        return _decode(status)
    if isinstance(error, status_pb2.Status):
        return _decode(error)
    decoded = rpc_status.from_call(error) if isinstance(error, grpc.Call) else None
    if decoded is None:
        return ErrorDetails(code=error.code(), message=error.details() or "")
    return _decode(decoded)


_TYPES = {
    error_details_pb2.BadRequest.DESCRIPTOR.full_name: ("bad_request", error_details_pb2.BadRequest),
    error_details_pb2.ErrorInfo.DESCRIPTOR.full_name: ("error_info", error_details_pb2.ErrorInfo),
    error_details_pb2.RetryInfo.DESCRIPTOR.full_name: ("retry_info", error_details_pb2.RetryInfo),
    assembler_pb2.BudgetOverflowDetail.DESCRIPTOR.full_name: ("budget_overflow", assembler_pb2.BudgetOverflowDetail),
}


def _decode(status: status_pb2.Status) -> ErrorDetails:
    """The typed details of a `google.rpc.Status` (the first of each type; the sidecar sends one)."""
    typed: dict[str, Any] = {}
    other = []
    for packed in status.details:
        known = _TYPES.get(packed.TypeName())
        if known is None or known[0] in typed:
            other.append(packed)
            continue
        name, message_type = known
        detail = message_type()
        packed.Unpack(detail)
        typed[name] = detail
    code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
    return ErrorDetails(code=code, message=status.message, other=tuple(other), **typed)
