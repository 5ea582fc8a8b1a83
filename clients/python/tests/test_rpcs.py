"""Every RPC of the contract against a real sidecar: what a gateway relies on in each answer."""

import uuid

import pytest

from context_assembler import error_details
from context_assembler.v1 import assembler_pb2 as pb

TIMEOUT_SECS = 10
MODEL = "gpt-4o"
BUDGET = 330
QUERY = "Yes - can I get my money back?"
# The evidence item that needs a scope the principal lacks, and a phrase only it contains.
FILTERED_ID = "pricing"
FILTERED_TEXT = "Internal margin table"

# Compact: how many latest messages stay verbatim (the last three split the policy lookup's call
# from its result, so the cut must move back one), and the pinned item restored after the summary.
PRESERVE_RECENT = 3
PINNED_ID = "case"
PINNED_KIND = "task"

# Retain and recall: the principal, the one scope the retained memory requires, the memory's type
# and text, and a phrase only that text holds.
PRINCIPAL_ID = "user-42"
MEMORY_SCOPE = "support"
MEMORY_TYPE = "decision"
MEMORY_TEXT = "Refund approved for order A-1009: the annual plan was bought within the 14-day window."
MEMORY_PHRASE = "within the 14-day window"
RECALL_QUERY = "Was the refund for order A-1009 approved?"
RECALL_BLOCK = "recalled_memories"  # Recall.block left empty names this block
RETAIN_REQUEST_ID = "clients-python-retain"


def support_request(request_id: str = "clients-python-1", model: str = MODEL) -> pb.AssembleRequest:
    """A support-desk prompt: static prefix, account state, scored evidence (one item the
    principal may not see), older and recent turns with a tool call split across them."""
    item = pb.Item
    return pb.AssembleRequest(
        request_id=request_id,
        model=model,
        max_input_tokens=BUDGET,
        static_segments=[
            pb.Segment(id="system", kind=pb.SEGMENT_KIND_SYSTEM,
                       content="You are the support assistant for Acme. Answer only from the documents provided."),
            pb.Segment(id="policy", kind=pb.SEGMENT_KIND_POLICY,
                       content="Never reveal internal pricing. Escalate legal questions."),
            pb.Segment(id="schema", kind=pb.SEGMENT_KIND_OUTPUT_SCHEMA,
                       content='Reply as JSON: {"answer": string, "sources": [string]}'),
        ],
        blocks=[
            pb.Block(name="account", kind=pb.BLOCK_KIND_STATE, items=[
                item(id="plan", content="plan: pro (annual)\nregion: EU\ncase: #4411 open", trusted=True),
            ]),
            pb.Block(name="kb", kind=pb.BLOCK_KIND_EVIDENCE, max_tokens=130, items=[
                item(id="refunds", source="kb/refunds.md", score=0.92,
                     content="Annual plans bought in the EU can be refunded in full within 14 days of purchase. "
                             "After 14 days, refunds are prorated by unused months."),
                item(id=FILTERED_ID, source="internal/pricing.md", score=0.88,
                     content=FILTERED_TEXT + ": pro annual 71% margin.", required_scopes=["finance"]),
                item(id="proration", source="kb/proration.md", score=0.75,
                     content="Prorated refunds are computed per unused full month. Partial months are not refunded."),
                item(id="shipping", source="kb/shipping.md", score=0.31,
                     content="Hardware ships from the Rotterdam warehouse within two business days. Tracking numbers "
                             "are emailed on dispatch. Customs fees are paid by the recipient outside the EU.",
                     compact_form="Hardware ships from Rotterdam in 2 business days."),
            ]),
            pb.Block(name="history", kind=pb.BLOCK_KIND_HISTORY, items=[
                item(id="h1", role=pb.ROLE_USER, content="Hi, I bought the annual plan last week."),
                item(id="h2", role=pb.ROLE_ASSISTANT, content="Let me look up your order.",
                     tool_call_ids=["lookup-1"]),
            ]),
            pb.Block(name="recent", kind=pb.BLOCK_KIND_RECENT_TURNS, items=[
                item(id="r1", role=pb.ROLE_TOOL, tool_call_id="lookup-1",
                     content='{"order": "A-1009", "date": "2026-11-15", "plan": "pro-annual"}'),
                item(id="r2", role=pb.ROLE_ASSISTANT,
                     content="I found order A-1009 from 15 November. How can I help?"),
                item(id="r3", role=pb.ROLE_USER, content="I am not happy with it."),
                item(id="r4", role=pb.ROLE_ASSISTANT, content="Sorry to hear that. Would you like a refund?"),
            ]),
        ],
        query=QUERY,
        principal=pb.Principal(id=PRINCIPAL_ID, scopes=[MEMORY_SCOPE]),
        session_id="session-42",
    )


def assert_support_response(request: pb.AssembleRequest, resp: pb.AssembleResponse) -> None:
    """What every answer to support_request must hold."""
    assert resp.request_id == request.request_id
    assert resp.messages, "messages are not empty"
    last = resp.messages[-1]
    assert (last.role, last.content) == (pb.ROLE_USER, QUERY), "the query is the last message, as user"
    assert resp.usage.budget == BUDGET
    assert 0 < resp.usage.total_tokens <= resp.usage.budget
    assert [d.name for d in resp.decisions] == [b.name for b in request.blocks], "one decision per block, in order"
    assert FILTERED_ID in [i for d in resp.decisions for i in d.filtered_item_ids]
    assert all(FILTERED_TEXT not in m.content for m in resp.messages), "filtered content is never rendered"
    calls: set[str] = set()
    for m in resp.messages:
        calls.update(m.tool_call_ids)
        if m.role == pb.ROLE_TOOL:
            assert m.tool_call_id in calls, "every tool result follows its call"


def test_list_models_lists_the_test_model(stub):
    models = stub.ListModels(pb.ListModelsRequest(), timeout=TIMEOUT_SECS).models
    assert [m.name for m in models] == sorted(m.name for m in models), "sorted by name"
    model = next((m for m in models if m.name == MODEL), None)
    assert model is not None
    assert model.exact and model.encoding == "o200k_base" and model.context_window > 0


def test_count_tokens_by_model_and_by_encoding(stub):
    by_model = stub.CountTokens(pb.CountTokensRequest(model=MODEL, text="hello world"), timeout=TIMEOUT_SECS)
    assert (by_model.tokens, by_model.tokenizer, by_model.exact) == (2, "o200k_base", True)
    by_encoding = stub.CountTokens(pb.CountTokensRequest(encoding="cl100k_base", text="hello world hello"),
                                   timeout=TIMEOUT_SECS)
    assert (by_encoding.tokens, by_encoding.tokenizer, by_encoding.exact) == (3, "cl100k_base", True)


def test_assemble_keeps_the_budget_and_filters_what_the_principal_may_not_see(stub):
    request = support_request()
    resp = stub.Assemble(request, timeout=TIMEOUT_SECS)
    assert_support_response(request, resp)
    assert resp.model == MODEL
    assert resp.usage.tokenizer == "o200k_base" and resp.usage.exact
    assert resp.cache.prefix_hash and resp.cache.prefix_message_count >= 1


def test_assemble_batch_answers_each_request_in_order_and_a_bad_one_alone(stub):
    good = [support_request("batch-0"), support_request("batch-2")]
    bad = pb.AssembleRequest(request_id="batch-1", model="no-such-model", query="")
    resp = stub.AssembleBatch(pb.AssembleBatchRequest(requests=[good[0], bad, good[1]]), timeout=TIMEOUT_SECS)

    assert [r.WhichOneof("result") for r in resp.results] == ["response", "error", "response"]
    assert_support_response(good[0], resp.results[0].response)
    assert_support_response(good[1], resp.results[2].response)
    details = error_details(resp.results[1].error)
    assert details.code.name == "INVALID_ARGUMENT"
    assert "model" in details.fields
    # The two good requests share their static prefix: one group, warmed up by one of them.
    assert [list(g.members) for g in resp.groups] == [[0, 2]]
    assert resp.groups[0].warmup in (0, 2) and resp.groups[0].shared_prefix_tokens > 0
    assert sorted(resp.order) == [0, 2] and resp.order[0] == resp.groups[0].warmup


def test_assemble_stream_answers_each_message_in_order(stub):
    requests = [support_request("stream-0"), pb.AssembleRequest(request_id="stream-1", model="no-such-model"),
                support_request("stream-2")]
    answers = list(stub.AssembleStream(iter(requests), timeout=TIMEOUT_SECS))

    assert [(a.index, a.request_id) for a in answers] == [(0, "stream-0"), (1, "stream-1"), (2, "stream-2")]
    assert [a.result.WhichOneof("result") for a in answers] == ["response", "error", "response"]
    assert_support_response(requests[0], answers[0].result.response)
    assert_support_response(requests[2], answers[2].result.response)
    details = error_details(answers[1].result.error)
    assert details.code.name == "INVALID_ARGUMENT" and "model" in details.fields


def test_report_usage_matches_the_assembled_count(stub):
    request = support_request(f"clients-python-usage-{uuid.uuid4().hex}")
    usage = stub.Assemble(request, timeout=TIMEOUT_SECS).usage
    sidecar = usage.total_tokens + usage.tools_tokens
    report = stub.ReportUsage(pb.ReportUsageRequest(request_id=request.request_id, provider="openai",
                                                    prompt_tokens=sidecar), timeout=TIMEOUT_SECS)
    assert report.matched and report.sidecar_tokens == sidecar and report.relative_error == 0

    unknown = stub.ReportUsage(pb.ReportUsageRequest(request_id=f"never-assembled-{uuid.uuid4().hex}",
                                                     provider="openai", prompt_tokens=100), timeout=TIMEOUT_SECS)
    assert not unknown.matched


def turn(message_id: str, role: int, text: str, *more: pb.ContentBlock) -> pb.ConversationMessage:
    """A conversation message of one text block, with more blocks appended."""
    return pb.ConversationMessage(id=message_id, role=role, content=[pb.ContentBlock(text=text), *more])


def tool_use(call_id: str, name: str, arguments: str) -> pb.ContentBlock:
    return pb.ContentBlock(tool_use=pb.ToolUse(id=call_id, name=name, input=arguments))


def tool_result(message_id: str, call_id: str, output: str) -> pb.ConversationMessage:
    return pb.ConversationMessage(id=message_id, role=pb.ROLE_TOOL, content=[
        pb.ContentBlock(tool_result=pb.ToolResult(tool_use_id=call_id, output=output))])


def conversation() -> list[pb.ConversationMessage]:
    """A support chat to compact: a system message, an order lookup with a long result, then a
    policy lookup whose call and result straddle the last PRESERVE_RECENT messages."""
    orders = "".join(f'{{"order": "A-{990 + i}", "plan": "pro-annual", "status": "paid"}}\n' for i in range(20))
    return [
        turn("sys", pb.ROLE_SYSTEM, "You are the support assistant for Acme."),
        turn("u1", pb.ROLE_USER, "Hi, I bought the annual plan last week. Which orders do I have?"),
        turn("a1", pb.ROLE_ASSISTANT, "Let me look up your orders.",
             tool_use("orders-1", "find_orders", '{"customer": "user-42"}')),
        tool_result("t1", "orders-1", orders),
        turn("a2", pb.ROLE_ASSISTANT, "You have 20 orders; the latest is A-1009 from 15 November."),
        turn("u2", pb.ROLE_USER, "I am not happy with A-1009. Can I get my money back?"),
        turn("a3", pb.ROLE_ASSISTANT, "Let me check the refund policy.",
             tool_use("policy-1", "read_policy", '{"topic": "refunds"}')),
        tool_result("t2", "policy-1",
                    "Annual plans bought in the EU can be refunded in full within 14 days of purchase."),
        turn("a4", pb.ROLE_ASSISTANT, "A-1009 is within 14 days, so a full refund is possible. Shall I start it?"),
        turn("u3", pb.ROLE_USER, "Yes, please."),
    ]


def first_text(m: pb.ConversationMessage) -> str:
    return m.content[0].text if m.content else ""


def test_compact_summarizes_the_older_turns_and_keeps_the_recent_ones_verbatim(stub):
    messages = conversation()
    request = pb.CompactRequest(
        request_id="clients-python-compact", model=MODEL, session_id="session-42", messages=messages,
        trigger_tokens=0, preserve_recent=PRESERVE_RECENT,
        pinned=[pb.PinnedItem(id=PINNED_ID, kind=PINNED_KIND, content="Refund request for order A-1009 (case #4411).")],
    )
    resp = stub.Compact(request, timeout=TIMEOUT_SECS)
    out = resp.messages

    assert resp.request_id == request.request_id
    assert resp.compacted and resp.outcome == pb.COMPACT_OUTCOME_COMPACTED
    assert resp.tokens_after < resp.tokens_before and resp.tokens_after <= resp.target_tokens
    assert (resp.trigger_tokens, resp.preserve_recent) == (0, PRESERVE_RECENT)
    assert out[0] == messages[0], "the leading system message is kept as it is"
    # Expected: system, continuation (summary), pinned item, then the kept messages verbatim.
    assert resp.HasField("summary_index") and resp.summary_index == 1
    assert "<summary>" in first_text(out[1])
    assert out[2].role == pb.ROLE_USER
    assert first_text(out[2]).startswith(f'<pinned kind="{PINNED_KIND}" id="{PINNED_ID}">')
    p = resp.provenance
    assert resp.HasField("provenance") and p.start == 1 and p.start < p.end <= len(messages) - PRESERVE_RECENT
    assert list(p.message_ids) == [m.id for m in messages[p.start:p.end] if m.id]
    assert list(out[3:]) == messages[p.end:], "the messages after the cut are kept verbatim"
    calls: set[str] = set()
    for m in out:
        for b in m.content:
            if b.HasField("tool_use"):
                calls.add(b.tool_use.id)
            if b.HasField("tool_result"):
                assert b.tool_result.tool_use_id in calls, "the cut keeps a call with its result"


def retain_request(subject: str, *texts: str, key: str = "turn-1") -> pb.RetainRequest:
    """Stores one decision per text, each requiring MEMORY_SCOPE."""
    return pb.RetainRequest(
        idempotency_key=f"{subject}/{key}", subject=subject, required_scopes=[MEMORY_SCOPE],
        request_id=RETAIN_REQUEST_ID, turn=1,
        observations=[pb.Observation(type=MEMORY_TYPE, text=text, facts=["order: A-1009"]) for text in texts],
    )


def is_memory_id(value: str) -> bool:
    return len(value) == 32 and all(c in "0123456789abcdef" for c in value)


def recall_request(subject: str, scopes: list[str]) -> pb.AssembleRequest:
    """Asks for a recall of subject's memories for a principal holding scopes."""
    return pb.AssembleRequest(
        request_id="clients-python-recall", model=MODEL,
        static_segments=[pb.Segment(id="system", kind=pb.SEGMENT_KIND_SYSTEM,
                                    content="You are the support assistant for Acme.")],
        query=RECALL_QUERY, principal=pb.Principal(id=PRINCIPAL_ID, scopes=scopes), session_id="session-42",
        recall=pb.Recall(subject=subject),
    )


def rendered(resp: pb.AssembleResponse, text: str) -> bool:
    return any(text in m.content for m in resp.messages)


@pytest.fixture
def retained(stub, subject: str) -> str:
    """The id of one memory retained under subject (the Retain test checks the call itself)."""
    first = stub.Retain(retain_request(subject, MEMORY_TEXT), timeout=TIMEOUT_SECS)
    assert len(first.memory_ids) == 1
    return first.memory_ids[0]


def test_retain_stores_once_and_a_retry_with_the_same_key_replays(stub, subject):
    request = retain_request(subject, MEMORY_TEXT)
    first = stub.Retain(request, timeout=TIMEOUT_SECS)
    again = stub.Retain(request, timeout=TIMEOUT_SECS)

    assert len(first.memory_ids) == 1 and is_memory_id(first.memory_ids[0])
    assert not first.replayed and not first.problems
    assert again.replayed and list(again.memory_ids) == list(first.memory_ids)


def test_assemble_recalls_a_retained_memory_only_for_a_principal_holding_its_scope(stub, subject, retained):
    allowed = stub.Assemble(recall_request(subject, [MEMORY_SCOPE]), timeout=TIMEOUT_SECS)
    denied = stub.Assemble(recall_request(subject, []), timeout=TIMEOUT_SECS)

    report = allowed.recall
    assert allowed.HasField("recall") and report.block == RECALL_BLOCK
    assert retained in report.recalled_ids and retained in report.kept_ids and retained not in report.dropped_ids
    block = next(d for d in allowed.decisions if d.name == RECALL_BLOCK)
    assert block.kind == pb.BLOCK_KIND_MEMORY and f"memory:{retained}" in block.kept_item_ids
    assert rendered(allowed, f"memory:{retained}") and rendered(allowed, MEMORY_PHRASE)
    assert denied.HasField("recall") and retained not in denied.recall.recalled_ids
    assert not rendered(denied, MEMORY_PHRASE)


def test_list_memories_lists_only_what_the_principal_may_see(stub, subject, retained):
    scoped = stub.ListMemories(pb.ListMemoriesRequest(
        subject=subject, principal=pb.Principal(id=PRINCIPAL_ID, scopes=[MEMORY_SCOPE])), timeout=TIMEOUT_SECS)
    anonymous = stub.ListMemories(pb.ListMemoriesRequest(subject=subject), timeout=TIMEOUT_SECS)

    assert [m.id for m in scoped.memories] == [retained] and scoped.hidden == 0
    listed = scoped.memories[0]
    assert (listed.subject, listed.type) == (subject, MEMORY_TYPE)
    assert listed.WhichOneof("content") == "observation" and listed.observation.text == MEMORY_TEXT
    assert list(listed.required_scopes) == [MEMORY_SCOPE]
    assert (listed.request_id, listed.turn) == (RETAIN_REQUEST_ID, 1)
    assert not anonymous.memories and anonymous.hidden == 1


def test_forget_deletes_by_id_then_the_whole_subject(stub, subject):
    kept_text = "The customer prefers answers in German."
    ids = stub.Retain(retain_request(subject, MEMORY_TEXT, kept_text), timeout=TIMEOUT_SECS).memory_ids
    assert len(ids) == 2
    principal = pb.Principal(id=PRINCIPAL_ID, scopes=[MEMORY_SCOPE])

    never_stored = "0" * 32
    by_id = stub.Forget(pb.ForgetRequest(subject=subject, ids=[ids[0], never_stored]), timeout=TIMEOUT_SECS)
    assert (by_id.deleted, by_id.not_found) == (1, 1)
    left = stub.ListMemories(pb.ListMemoriesRequest(subject=subject, principal=principal), timeout=TIMEOUT_SECS)
    assert [m.id for m in left.memories] == [ids[1]]

    everything = stub.Forget(pb.ForgetRequest(subject=subject), timeout=TIMEOUT_SECS)
    assert (everything.deleted, everything.not_found) == (1, 0)
    left = stub.ListMemories(pb.ListMemoriesRequest(subject=subject, principal=principal), timeout=TIMEOUT_SECS)
    assert not left.memories and left.hidden == 0
