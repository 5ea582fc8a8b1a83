package assembler_test

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/context-assembler/context-assembler/clients/go/assembler"
	pb "github.com/context-assembler/context-assembler/clients/go/assemblerv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

const (
	demoBudget = 330
	demoQuery  = "Yes - can I get my money back?"
	// The evidence item that needs a scope the principal lacks, and a phrase only it holds.
	filteredID   = "pricing"
	filteredText = "Internal margin table"
)

// demoRequest is a support-desk prompt: static prefix, account state, scored evidence (one
// item the principal may not see), older and recent turns with a tool call split across them.
func demoRequest(id string) *pb.AssembleRequest {
	return &pb.AssembleRequest{
		RequestId:      id,
		Model:          model,
		MaxInputTokens: proto.Uint32(demoBudget),
		StaticSegments: []*pb.Segment{
			{Id: "system", Kind: pb.SegmentKind_SEGMENT_KIND_SYSTEM,
				Content: "You are the support assistant for Acme. Answer only from the documents provided."},
			{Id: "policy", Kind: pb.SegmentKind_SEGMENT_KIND_POLICY,
				Content: "Never reveal internal pricing. Escalate legal questions."},
			{Id: "schema", Kind: pb.SegmentKind_SEGMENT_KIND_OUTPUT_SCHEMA,
				Content: `Reply as JSON: {"answer": string, "sources": [string]}`},
		},
		Blocks: []*pb.Block{
			{Name: "account", Kind: pb.BlockKind_BLOCK_KIND_STATE, Items: []*pb.Item{
				{Id: "plan", Content: "plan: pro (annual)\nregion: EU\ncase: #4411 open", Trusted: true},
			}},
			{Name: "kb", Kind: pb.BlockKind_BLOCK_KIND_EVIDENCE, MaxTokens: 130, Items: []*pb.Item{
				{Id: "refunds", Source: "kb/refunds.md", Score: 0.92,
					Content: "Annual plans bought in the EU can be refunded in full within 14 days of purchase. " +
						"After 14 days, refunds are prorated by unused months."},
				{Id: filteredID, Source: "internal/pricing.md", Score: 0.88,
					Content: filteredText + ": pro annual 71% margin.", RequiredScopes: []string{"finance"}},
				{Id: "proration", Source: "kb/proration.md", Score: 0.75,
					Content: "Prorated refunds are computed per unused full month. Partial months are not refunded."},
				{Id: "shipping", Source: "kb/shipping.md", Score: 0.31,
					Content: "Hardware ships from the Rotterdam warehouse within two business days. Tracking numbers " +
						"are emailed on dispatch. Customs fees are paid by the recipient outside the EU.",
					CompactForm: proto.String("Hardware ships from Rotterdam in 2 business days.")},
			}},
			{Name: "history", Kind: pb.BlockKind_BLOCK_KIND_HISTORY, Items: []*pb.Item{
				{Id: "h1", Role: pb.Role_ROLE_USER, Content: "Hi, I bought the annual plan last week."},
				{Id: "h2", Role: pb.Role_ROLE_ASSISTANT, Content: "Let me look up your order.",
					ToolCallIds: []string{"lookup-1"}},
			}},
			{Name: "recent", Kind: pb.BlockKind_BLOCK_KIND_RECENT_TURNS, Items: []*pb.Item{
				{Id: "r1", Role: pb.Role_ROLE_TOOL, ToolCallId: "lookup-1",
					Content: `{"order": "A-1009", "date": "2026-11-15", "plan": "pro-annual"}`},
				{Id: "r2", Role: pb.Role_ROLE_ASSISTANT,
					Content: "I found order A-1009 from 15 November. How can I help?"},
				{Id: "r3", Role: pb.Role_ROLE_USER, Content: "I am not happy with it."},
				{Id: "r4", Role: pb.Role_ROLE_ASSISTANT, Content: "Sorry to hear that. Would you like a refund?"},
			}},
		},
		Query:     demoQuery,
		Principal: &pb.Principal{Id: "user-42", Scopes: []string{"support"}},
		SessionId: "session-42",
	}
}

// checkDemo checks an answer to demoRequest(id): what the old smoke program checked.
func checkDemo(t *testing.T, req *pb.AssembleRequest, resp *pb.AssembleResponse) {
	t.Helper()
	if resp.GetRequestId() != req.GetRequestId() {
		t.Errorf("request_id %q, want %q echoed", resp.GetRequestId(), req.GetRequestId())
	}
	msgs := resp.GetMessages()
	if len(msgs) == 0 {
		t.Fatal("no messages")
	}
	if last := msgs[len(msgs)-1]; last.GetRole() != pb.Role_ROLE_USER || last.GetContent() != demoQuery {
		t.Errorf("last message %s %q, want the query as user", last.GetRole(), last.GetContent())
	}
	u := resp.GetUsage()
	if u.GetBudget() != demoBudget || u.GetTotalTokens() == 0 || u.GetTotalTokens() > u.GetBudget() {
		t.Errorf("usage: total_tokens %d, budget %d; want 0 < total <= budget %d",
			u.GetTotalTokens(), u.GetBudget(), demoBudget)
	}
	var names []string
	filtered := false
	for _, d := range resp.GetDecisions() {
		names = append(names, d.GetName())
		filtered = filtered || contains(d.GetFilteredItemIds(), filteredID)
	}
	if got := strings.Join(names, ","); got != "account,kb,history,recent" {
		t.Errorf("decisions for %s, want one per block in request order", got)
	}
	if !filtered {
		t.Errorf("%q not in any filtered_item_ids", filteredID)
	}
	calls := map[string]bool{}
	for i, m := range msgs {
		if strings.Contains(m.GetContent(), filteredText) {
			t.Errorf("message %d renders the filtered item", i)
		}
		for _, id := range m.GetToolCallIds() {
			calls[id] = true
		}
		if m.GetRole() == pb.Role_ROLE_TOOL && !calls[m.GetToolCallId()] {
			t.Errorf("message %d answers tool call %q before its call", i, m.GetToolCallId())
		}
	}
}

func TestListModelsListsTheDefaultModels(t *testing.T) {
	c := withMemory(t)
	resp, err := c.ListModels(ctx(t), &pb.ListModelsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var listed *pb.ModelInfo
	for _, m := range resp.GetModels() {
		if m.GetName() == model {
			listed = m
		}
	}
	if listed == nil {
		t.Fatalf("%s not among %d models", model, len(resp.GetModels()))
	}
	if listed.GetContextWindow() == 0 || listed.GetEncoding() == "" || !listed.GetExact() {
		t.Errorf("%s: context_window %d, encoding %q, exact %t; want a window, an encoding, exact",
			model, listed.GetContextWindow(), listed.GetEncoding(), listed.GetExact())
	}
}

func TestAssembleFitsTheBudgetAndFiltersByScope(t *testing.T) {
	c := withMemory(t)
	req := demoRequest(unique("go-assemble"))
	resp, err := c.Assemble(ctx(t), req)
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	checkDemo(t, req, resp)
}

func TestCountTokensByModelAndByEncoding(t *testing.T) {
	c := withMemory(t)
	text := "hello world, hello tokens"
	byModel, err := c.CountTokens(ctx(t), &pb.CountTokensRequest{
		Tokenizer: &pb.CountTokensRequest_Model{Model: model}, Text: text})
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if byModel.GetTokens() == 0 || byModel.GetTokens() > uint32(len(text)) || !byModel.GetExact() {
		t.Fatalf("%d tokens (exact %t) for %d bytes", byModel.GetTokens(), byModel.GetExact(), len(text))
	}
	byEncoding, err := c.CountTokens(ctx(t), &pb.CountTokensRequest{
		Tokenizer: &pb.CountTokensRequest_Encoding{Encoding: byModel.GetTokenizer()}, Text: text})
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if byEncoding.GetTokens() != byModel.GetTokens() {
		t.Errorf("encoding %s counts %d, model %s counts %d", byModel.GetTokenizer(), byEncoding.GetTokens(),
			model, byModel.GetTokens())
	}
	twice, err := c.CountTokens(ctx(t), &pb.CountTokensRequest{
		Tokenizer: &pb.CountTokensRequest_Model{Model: model}, Text: text + " " + text})
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if twice.GetTokens() <= byModel.GetTokens() {
		t.Errorf("twice the text counts %d, once %d", twice.GetTokens(), byModel.GetTokens())
	}
}

func TestInvalidArgumentNamesTheField(t *testing.T) {
	c := withMemory(t)
	_, err := c.Assemble(ctx(t), &pb.AssembleRequest{RequestId: "go-bad", Model: "no-such-model"})
	d := mustFail(t, err, codes.InvalidArgument)
	wantViolation(t, d, "model")
	wantViolation(t, d, "query")
}

func TestBudgetOverflowBreaksDownTheNonCuttableParts(t *testing.T) {
	c := withMemory(t)
	const budget = 200
	req := minimal("go-overflow", "What does the account say?")
	req.MaxInputTokens = proto.Uint32(budget)
	req.OutputReserve = proto.Uint32(0)
	req.Blocks = []*pb.Block{
		{Name: "notes", Kind: pb.BlockKind_BLOCK_KIND_EVIDENCE, Items: []*pb.Item{
			{Id: "n1", Content: "A short note.", Score: 0.5}}},
		{Name: "account", Kind: pb.BlockKind_BLOCK_KIND_STATE, Items: []*pb.Item{
			{Id: "state", Content: strings.Repeat("account ledger entry, verified and final. ", 200)}}},
	}
	_, err := c.Assemble(ctx(t), req)
	d := mustFail(t, err, codes.FailedPrecondition)
	wantErrorInfo(t, d, assembler.ReasonBudgetOverflow)
	md := d.ErrorInfo.GetMetadata()
	if md["budget"] != strconv.Itoa(budget) || md["model"] != model || md["non_cuttable_tokens"] == "" {
		t.Errorf("ErrorInfo metadata %v, want budget %d, model %s, non_cuttable_tokens", md, budget, model)
	}
	o := d.BudgetOverflow
	if o == nil {
		t.Fatalf("no BudgetOverflowDetail in %s (ErrorInfo %v)", d, md)
	}
	if o.GetModel() != model || o.GetBudget() != budget || o.GetNonCuttableTokens() <= uint64(budget) {
		t.Errorf("detail: model %q, budget %d, non_cuttable_tokens %d; want %s, %d, > budget",
			o.GetModel(), o.GetBudget(), o.GetNonCuttableTokens(), model, budget)
	}
	if md["non_cuttable_tokens"] != strconv.FormatUint(o.GetNonCuttableTokens(), 10) {
		t.Errorf("metadata non_cuttable_tokens %s, detail %d", md["non_cuttable_tokens"], o.GetNonCuttableTokens())
	}
	var account *pb.BlockNeed
	var blocks uint64
	for _, b := range o.GetBlocks() {
		blocks += b.GetTokens()
		if b.GetName() == "account" {
			account = b
		}
	}
	if account == nil || account.GetIndex() != 1 || account.GetKind() != pb.BlockKind_BLOCK_KIND_STATE ||
		account.GetCuttable() || account.GetTokens() <= uint64(budget) {
		t.Errorf("blocks %v: want \"account\" at index 1, STATE, not cuttable, over the budget", o.GetBlocks())
	}
	sum := o.GetStaticPrefixTokens() + o.GetToolsTokens() + o.GetQueryTokens() + o.GetFramingTokens() +
		blocks + o.GetTemplateTokens()
	if sum != o.GetNonCuttableTokens() || o.GetStaticPrefixTokens() == 0 || o.GetQueryTokens() == 0 {
		t.Errorf("static %d + tools %d + query %d + framing %d + blocks %d + template %d = %d, "+
			"want non_cuttable_tokens %d (static and query > 0)", o.GetStaticPrefixTokens(), o.GetToolsTokens(),
			o.GetQueryTokens(), o.GetFramingTokens(), blocks, o.GetTemplateTokens(), sum, o.GetNonCuttableTokens())
	}
	if o.GetMoreBlocks() != 0 {
		t.Errorf("more_blocks %d, want 0", o.GetMoreBlocks())
	}
}

func TestTooManyBlocksIsResourceExhaustedWithTheLimit(t *testing.T) {
	c := withMemory(t)
	const blocks = 65 // limits.max_blocks is 64 by default
	req := minimal("go-too-many-blocks", "Anything?")
	for i := 0; i < blocks; i++ {
		req.Blocks = append(req.Blocks, &pb.Block{Name: fmt.Sprintf("b%d", i), Kind: pb.BlockKind_BLOCK_KIND_EVIDENCE,
			Items: []*pb.Item{{Id: "i", Content: "x"}}})
	}
	_, err := c.Assemble(ctx(t), req)
	d := mustFail(t, err, codes.ResourceExhausted)
	wantErrorInfo(t, d, assembler.ReasonTooManyBlocks)
	if md := d.ErrorInfo.GetMetadata(); md["limit"] != "64" || md["value"] != strconv.Itoa(blocks) {
		t.Errorf("metadata %v, want limit 64, value %d", md, blocks)
	}
}

func TestAssembleBatchAnswersInOrderAndFailsABadRequestAlone(t *testing.T) {
	c := withMemory(t)
	reqs := []*pb.AssembleRequest{
		demoRequest("go-batch-0"),
		invalid("go-batch-1"),
		minimal("go-batch-2", "Where is my order?"),
		minimal("go-batch-3", "Can I change my plan?"),
	}
	resp, err := c.AssembleBatch(ctx(t), &pb.AssembleBatchRequest{Requests: reqs})
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if len(resp.GetResults()) != len(reqs) {
		t.Fatalf("%d results for %d requests", len(resp.GetResults()), len(reqs))
	}
	for i, r := range resp.GetResults() {
		if i == 1 {
			if r.GetError() == nil {
				t.Fatalf("result 1 (an unknown model) is not an error")
			}
			d, err := assembler.RequestErrorDetails(r.GetError())
			if err != nil {
				t.Fatal(err)
			}
			if d.Code != codes.InvalidArgument || int32(d.Code) != r.GetError().GetCode() {
				t.Errorf("result 1: code %s (RequestError.code %d), want INVALID_ARGUMENT", d.Code, r.GetError().GetCode())
			}
			wantViolation(t, d, "model")
			continue
		}
		if r.GetResponse() == nil {
			t.Fatalf("result %d: %v, want a response", i, r.GetError())
		}
		if r.GetResponse().GetRequestId() != reqs[i].GetRequestId() {
			t.Errorf("result %d answers %q, want %q", i, r.GetResponse().GetRequestId(), reqs[i].GetRequestId())
		}
	}
	checkDemo(t, reqs[0], resp.GetResults()[0].GetResponse())
	// The two minimal requests share their static prefix: one group holds both.
	shared := false
	for _, g := range resp.GetGroups() {
		shared = shared || fmt.Sprint(g.GetMembers()) == "[2 3]"
	}
	if !shared {
		t.Errorf("groups %v: want one holding requests 2 and 3 (the same static prefix)", resp.GetGroups())
	}
	order := append([]uint32(nil), resp.GetOrder()...)
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	if fmt.Sprint(order) != "[0 2 3]" {
		t.Errorf("order %v: want each successful request once (0, 2, 3)", resp.GetOrder())
	}
}

func TestAssembleStreamAnswersEachMessageInOrder(t *testing.T) {
	c := withMemory(t)
	stream, err := c.AssembleStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*pb.AssembleRequest{demoRequest("go-stream-0"), invalid("go-stream-1"), minimal("go-stream-2", "Hi?")}
	for i, req := range reqs {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		got, err := stream.Recv()
		if err != nil {
			t.Fatalf("message %d: %v", i, assembler.ErrorDetails(err))
		}
		if got.GetIndex() != uint64(i) || got.GetRequestId() != req.GetRequestId() {
			t.Errorf("answer %d: index %d, request_id %q", i, got.GetIndex(), got.GetRequestId())
		}
		switch i {
		case 0:
			checkDemo(t, req, got.GetResult().GetResponse())
		case 1:
			d, err := assembler.RequestErrorDetails(got.GetResult().GetError())
			if err != nil || d == nil {
				t.Fatalf("answer 1: %v, %v; want a RequestError", got.GetResult(), err)
			}
			if d.Code != codes.InvalidArgument {
				t.Errorf("answer 1: %s, want INVALID_ARGUMENT", d)
			}
			wantViolation(t, d, "model")
		case 2:
			if got.GetResult().GetResponse().GetUsage().GetTotalTokens() == 0 {
				t.Errorf("answer 2: %v, want a response", got.GetResult())
			}
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("after CloseSend: %v, want the stream to end (io.EOF)", err)
	}
}

func TestReportUsageMatchesTheAssembledCount(t *testing.T) {
	c := withMemory(t)
	req := minimal(unique("go-report"), "How long do refunds take?")
	resp, err := c.Assemble(ctx(t), req)
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	total := resp.GetUsage().GetTotalTokens() + resp.GetUsage().GetToolsTokens()
	report, err := c.ReportUsage(ctx(t), &pb.ReportUsageRequest{RequestId: req.GetRequestId(), Provider: "openai",
		PromptTokens: total})
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if !report.GetMatched() || report.GetSidecarTokens() != total || report.GetRelativeError() != 0 {
		t.Errorf("matched %t, sidecar_tokens %d, relative_error %g; want true, %d, 0",
			report.GetMatched(), report.GetSidecarTokens(), report.GetRelativeError(), total)
	}
	unknown, err := c.ReportUsage(ctx(t), &pb.ReportUsageRequest{RequestId: unique("go-never-assembled"),
		Provider: "openai", PromptTokens: 10})
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if unknown.GetMatched() {
		t.Error("a request_id never assembled is matched")
	}
	_, err = c.ReportUsage(ctx(t), &pb.ReportUsageRequest{RequestId: req.GetRequestId(), PromptTokens: total})
	wantViolation(t, mustFail(t, err, codes.InvalidArgument), "provider")
}
