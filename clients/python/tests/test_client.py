"""The helper without a sidecar: the error decoder on statuses a client cannot provoke (RetryInfo
of OVERLOADED, SHUTTING_DOWN), connect's retry policy and wait_ready against an in-process
server, and the installed package's type stubs."""

import threading
from concurrent import futures
from importlib import resources

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from context_assembler import ERROR_DOMAIN, connect, error_details, wait_ready
from context_assembler.v1 import assembler_pb2 as pb
from context_assembler.v1 import assembler_pb2_grpc as pb_grpc

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]


def packed(message) -> any_pb2.Any:
    detail = any_pb2.Any()
    detail.Pack(message)
    return detail


def status(code: int, message: str, *details) -> status_pb2.Status:
    return status_pb2.Status(code=code, message=message, details=[packed(d) for d in details])


def info(reason: str, **metadata: str) -> error_details_pb2.ErrorInfo:
    return error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN, metadata=metadata)


def retry_after(seconds: int, nanos: int = 0) -> error_details_pb2.RetryInfo:
    return error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds, nanos=nanos))


def test_overloaded_decodes_its_error_info_and_retry_delay():
    details = error_details(status(RESOURCE_EXHAUSTED, "overloaded",
                                   info("OVERLOADED", limit="8", value="8"), retry_after(1, 500_000_000)))
    assert details.code == grpc.StatusCode.RESOURCE_EXHAUSTED and details.message == "overloaded"
    assert details.reason == "OVERLOADED" and details.metadata == {"limit": "8", "value": "8"}
    assert details.retry_delay == 1.5
    assert details.bad_request is None and details.budget_overflow is None and details.other == ()


def test_shutting_down_in_a_stream_request_error_decodes_from_its_status_details():
    encoded = status(UNAVAILABLE, "shutting down", info("SHUTTING_DOWN")).SerializeToString()
    error = pb.RequestError(code=UNAVAILABLE, message="shutting down", status_details=encoded)
    details = error_details(error)
    assert details.code == grpc.StatusCode.UNAVAILABLE and details.reason == "SHUTTING_DOWN"
    assert details.error_info.domain == ERROR_DOMAIN and details.retry_delay is None


def test_memory_unavailable_decodes_its_retry_delay():
    details = error_details(status(UNAVAILABLE, "store busy", info("MEMORY_UNAVAILABLE"), retry_after(2)))
    assert (details.code, details.reason, details.retry_delay) == (grpc.StatusCode.UNAVAILABLE,
                                                                  "MEMORY_UNAVAILABLE", 2.0)


def test_a_request_error_without_details_keeps_its_code_and_message():
    details = error_details(pb.RequestError(code=RESOURCE_EXHAUSTED, message="too many"))
    assert (details.code, details.message, details.error_info) == (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                                  "too many", None)


def test_a_request_error_whose_details_contradict_its_code_is_refused():
    encoded = status(UNAVAILABLE, "x").SerializeToString()
    with pytest.raises(ValueError):
        error_details(pb.RequestError(code=RESOURCE_EXHAUSTED, message="x", status_details=encoded))


def test_an_unknown_detail_is_kept_packed():
    unknown = pb.Warning(code="W", message="m")
    details = error_details(status(UNAVAILABLE, "x", unknown, info("SHUTTING_DOWN")))
    assert details.reason == "SHUTTING_DOWN"
    assert [d.TypeName() for d in details.other] == ["context_assembler.v1.Warning"]


class Scripted(pb_grpc.AssemblerServicer):
    """ListModels answers each status of `failures` in turn, then a model; Assemble aborts with
    `rich`, a google.rpc.Status with details."""

    def __init__(self, failures=(), rich=None):
        self.failures = list(failures)
        self.rich = rich
        self.calls = 0

    def ListModels(self, request, context):
        self.calls += 1
        if self.failures:
            context.abort(self.failures.pop(0), "scripted failure")
        return pb.ListModelsResponse(models=[pb.ModelInfo(name="gpt-4o")])

    def Assemble(self, request, context):
        context.abort_with_status(rpc_status.to_status(self.rich))


@pytest.fixture
def serve():
    """Starts an in-process server with the given servicers; returns its address."""
    servers = []

    def start(servicer=None, health_servicer=None) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        if servicer is not None:
            pb_grpc.add_AssemblerServicer_to_server(servicer, server)
        if health_servicer is not None:
            health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(grace=None)


def test_connect_retries_unavailable(serve):
    servicer = Scripted(failures=[grpc.StatusCode.UNAVAILABLE] * 2)
    with connect(serve(servicer)) as connection:
        models = connection.stub.ListModels(pb.ListModelsRequest(), timeout=10).models
    assert [m.name for m in models] == ["gpt-4o"] and servicer.calls == 3


def test_connect_does_not_retry_other_codes(serve):
    servicer = Scripted(failures=[grpc.StatusCode.INVALID_ARGUMENT])
    with connect(serve(servicer)) as connection, pytest.raises(grpc.RpcError) as raised:
        connection.stub.ListModels(pb.ListModelsRequest(), timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT and servicer.calls == 1


def test_connect_without_a_service_config_does_not_retry(serve):
    servicer = Scripted(failures=[grpc.StatusCode.UNAVAILABLE])
    with connect(serve(servicer), service_config=None) as connection, pytest.raises(grpc.RpcError) as raised:
        connection.stub.ListModels(pb.ListModelsRequest(), timeout=10)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE and servicer.calls == 1


def test_a_call_error_decodes_the_details_it_carried_on_the_wire(serve):
    overflow = pb.BudgetOverflowDetail(model="gpt-4o", budget=50, non_cuttable_tokens=400, blocks=[
        pb.BlockNeed(name="account", index=1, kind=pb.BLOCK_KIND_STATE, tokens=380)])
    rich = status(grpc.StatusCode.FAILED_PRECONDITION.value[0], "does not fit",
                  info("BUDGET_OVERFLOW", budget="50"), overflow)
    with connect(serve(Scripted(rich=rich))) as connection, pytest.raises(grpc.RpcError) as raised:
        connection.stub.Assemble(pb.AssembleRequest(), timeout=10)
    details = error_details(raised.value)
    assert details.code == grpc.StatusCode.FAILED_PRECONDITION and details.reason == "BUDGET_OVERFLOW"
    assert details.budget_overflow == overflow


def test_a_call_error_without_details_keeps_its_code(serve):
    with connect(serve(Scripted(failures=[grpc.StatusCode.INTERNAL]))) as connection:
        with pytest.raises(grpc.RpcError) as raised:
            connection.stub.ListModels(pb.ListModelsRequest(), timeout=10)
    details = error_details(raised.value)
    assert (details.code, details.message, details.error_info) == (grpc.StatusCode.INTERNAL,
                                                                  "scripted failure", None)


def test_wait_ready_returns_once_serving(serve):
    checker = health.HealthServicer()
    checker.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    address = serve(health_servicer=checker)
    timer = threading.Timer(0.3, checker.set, ("", health_pb2.HealthCheckResponse.SERVING))
    timer.start()
    try:
        with connect(address) as connection:
            wait_ready(connection.channel, 10)
    finally:
        timer.cancel()


def test_wait_ready_times_out_naming_the_last_status(serve):
    checker = health.HealthServicer()
    checker.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    with connect(serve(health_servicer=checker)) as connection, pytest.raises(TimeoutError, match="NOT_SERVING"):
        wait_ready(connection.channel, 0.5)


def test_the_installed_package_carries_its_type_stubs():
    v1 = resources.files("context_assembler.v1")
    assert v1.joinpath("assembler_pb2.pyi").is_file()
    assert resources.files("context_assembler").joinpath("py.typed").is_file()
