"""The rich error details a client acts on, as a real sidecar answers them, decoded by
context_assembler.error_details."""

import grpc
import pytest

from context_assembler import ERROR_DOMAIN, error_details
from context_assembler.v1 import assembler_pb2 as pb

TIMEOUT_SECS = 10
MODEL = "gpt-4o"
# The sidecar's default `limits.max_blocks`.
DEFAULT_MAX_BLOCKS = 64
# A budget the non-cuttable STATE block below needs many times over.
SMALL_BUDGET = 50


def failing(call, request) -> grpc.RpcError:
    """The error `call(request)` answers; fails the test when it answers a response."""
    with pytest.raises(grpc.RpcError) as raised:
        call(request, timeout=TIMEOUT_SECS)
    return raised.value


def test_invalid_argument_names_each_bad_field_in_a_bad_request(stub):
    err = failing(stub.Assemble, pb.AssembleRequest(request_id="bad", model="no-such-model", query=""))
    details = error_details(err)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT == err.code()
    assert "model" in details.fields and "query" in details.fields
    assert all(v.description for v in details.bad_request.field_violations)


def test_report_usage_without_a_provider_is_invalid_argument_naming_it(stub):
    err = failing(stub.ReportUsage, pb.ReportUsageRequest(request_id="r", provider=""))
    details = error_details(err)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT and details.fields == ["provider"]


def test_forget_without_a_subject_is_invalid_argument_naming_it(stub):
    details = error_details(failing(stub.Forget, pb.ForgetRequest(subject="")))
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT and "subject" in details.fields


def test_budget_overflow_breaks_down_what_may_never_be_cut(stub):
    state = pb.Block(name="account", kind=pb.BLOCK_KIND_STATE, items=[
        pb.Item(id=f"fact-{i}", content=f"fact {i}: the customer's order A-{1000 + i} is paid and shipped.")
        for i in range(40)
    ])
    evidence = pb.Block(name="kb", kind=pb.BLOCK_KIND_EVIDENCE, items=[
        pb.Item(id="refunds", content="Annual plans can be refunded within 14 days.", score=0.9),
    ])
    request = pb.AssembleRequest(
        request_id="overflow", model=MODEL, max_input_tokens=SMALL_BUDGET,
        static_segments=[pb.Segment(id="system", content="You are the support assistant for Acme.")],
        blocks=[evidence, state], query="Where is my order?",
    )
    details = error_details(failing(stub.Assemble, request))

    assert details.code == grpc.StatusCode.FAILED_PRECONDITION
    assert (details.reason, details.error_info.domain) == ("BUDGET_OVERFLOW", ERROR_DOMAIN)
    overflow = details.budget_overflow
    assert overflow is not None, "a BudgetOverflowDetail beside the ErrorInfo"
    assert (overflow.model, overflow.budget) == (MODEL, SMALL_BUDGET)
    assert details.metadata["non_cuttable_tokens"] == str(overflow.non_cuttable_tokens)
    assert details.metadata["budget"] == str(overflow.budget)
    assert details.metadata["model"] == MODEL
    # The STATE block (never cut by default) is listed by name and position; the cuttable
    # evidence is not.
    needs = {(need.name, need.index) for need in overflow.blocks}
    assert ("account", 1) in needs and "kb" not in {name for name, _ in needs}
    account = next(need for need in overflow.blocks if need.name == "account")
    assert account.kind == pb.BLOCK_KIND_STATE and not account.cuttable and account.tokens > SMALL_BUDGET
    # The parts add up to the whole, and the whole does not fit.
    parts = (overflow.static_prefix_tokens + overflow.tools_tokens + overflow.query_tokens
             + overflow.framing_tokens + sum(need.tokens for need in overflow.blocks) + overflow.template_tokens)
    assert overflow.static_prefix_tokens > 0 and overflow.query_tokens > 0
    assert parts == overflow.non_cuttable_tokens > overflow.budget
    assert overflow.more_blocks == 0


def test_too_many_blocks_is_resource_exhausted_with_the_limit_and_the_count(stub):
    blocks = [pb.Block(name=f"b{i}", kind=pb.BLOCK_KIND_EVIDENCE, items=[pb.Item(id="x", content="x")])
              for i in range(DEFAULT_MAX_BLOCKS + 1)]
    details = error_details(failing(stub.Assemble, pb.AssembleRequest(model=MODEL, query="q", blocks=blocks)))

    assert details.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (details.reason, details.error_info.domain) == ("TOO_MANY_BLOCKS", ERROR_DOMAIN)
    assert details.metadata["limit"] == str(DEFAULT_MAX_BLOCKS)
    assert details.metadata["value"] == str(DEFAULT_MAX_BLOCKS + 1)


def test_retain_without_a_memory_store_is_memory_disabled(stub_no_memory):
    request = pb.RetainRequest(idempotency_key="k", subject="clients/python/no-memory",
                               observations=[pb.Observation(type="decision", text="t")])
    details = error_details(failing(stub_no_memory.Retain, request))

    assert details.code == grpc.StatusCode.FAILED_PRECONDITION
    assert (details.reason, details.error_info.domain) == ("MEMORY_DISABLED", ERROR_DOMAIN)
    assert details.retry_delay is None


def test_a_bad_request_in_a_batch_fails_alone_with_its_bad_request_detail(stub):
    good = pb.AssembleRequest(request_id="ok", model=MODEL, query="Where is my order?")
    bad = pb.AssembleRequest(request_id="bad", model=MODEL, query="q",
                             blocks=[pb.Block(name="dup", kind=pb.BLOCK_KIND_EVIDENCE),
                                     pb.Block(name="dup", kind=pb.BLOCK_KIND_EVIDENCE)])
    resp = stub.AssembleBatch(pb.AssembleBatchRequest(requests=[good, bad]), timeout=TIMEOUT_SECS)

    assert [r.WhichOneof("result") for r in resp.results] == ["response", "error"]
    error = resp.results[1].error
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and error.status_details
    details = error_details(error)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT and details.message == error.message
    assert any(field.startswith("blocks[1]") for field in details.fields), details.fields
