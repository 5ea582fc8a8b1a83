// Command go-client is an example Go client of the context-assembler sidecar.
//
// It lists the models, assembles one realistic prompt, prints its messages, decision report
// and usage, checks that the answer is sane, then checks that a malformed request is refused
// with INVALID_ARGUMENT and a google.rpc.BadRequest. It compacts a conversation and checks the
// summary, the pinned item, the provenance and the verbatim tail; retains a memory that needs a
// scope (and retries it), assembles with a recall of it and checks it is recalled, kept and
// rendered for a principal holding the scope and not for one without; and lists the subject's
// memories with and without the scope. It exits 1 if any check fails. The sidecar needs a
// memory store (the default SQLite file will do).
//
// Usage: go-client [ADDR]   (ADDR defaults to $CONTEXT_ASSEMBLER_ADDR, else 127.0.0.1:50051)
//
// The stubs are generated from proto/context_assembler/v1/assembler.proto by build.sh.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	assemblerv1 "github.com/context-assembler/context-assembler/gen/go/context_assembler/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const (
	defaultAddr = "127.0.0.1:50051"
	rpcTimeout  = 10 * time.Second
	model       = "gpt-4o"
	budget      = 330
	query       = "Yes - can I get my money back?"
	// The evidence item that needs a scope the principal lacks, and a phrase only it contains.
	filteredID   = "pricing"
	filteredText = "Internal margin table"
	truncateAt   = 72

	// Compact: how many latest messages stay verbatim (the last three split the policy lookup's
	// call from its result, so the cut must move back one), and the pinned item restored.
	preserveRecent = 3
	pinnedID       = "case"
	pinnedKind     = "task"

	// Retain and recall: the principal, the one scope the retained memory requires, the
	// memory's type and text, and a phrase only that text holds.
	principalID     = "user-42"
	memoryScope     = "support"
	memoryType      = "decision"
	memoryText      = "Refund approved for order A-1009: the annual plan was bought within the 14-day window."
	memoryPhrase    = "within the 14-day window"
	recallQuery     = "Was the refund for order A-1009 approved?"
	recallBlock     = "recalled_memories" // Recall.block left empty names this block
	retainRequestID = "clients-demo-1"
)

// demoRequest is a support-desk prompt: static prefix, account state, scored evidence (one
// item the principal may not see), older and recent turns with a tool call split across them.
func demoRequest() *assemblerv1.AssembleRequest {
	return &assemblerv1.AssembleRequest{
		RequestId:      "clients-demo-1",
		Model:          model,
		MaxInputTokens: proto.Uint32(budget),
		StaticSegments: []*assemblerv1.Segment{
			{Id: "system", Kind: assemblerv1.SegmentKind_SEGMENT_KIND_SYSTEM,
				Content: "You are the support assistant for Acme. Answer only from the documents provided."},
			{Id: "policy", Kind: assemblerv1.SegmentKind_SEGMENT_KIND_POLICY,
				Content: "Never reveal internal pricing. Escalate legal questions."},
			{Id: "schema", Kind: assemblerv1.SegmentKind_SEGMENT_KIND_OUTPUT_SCHEMA,
				Content: `Reply as JSON: {"answer": string, "sources": [string]}`},
		},
		Blocks: []*assemblerv1.Block{
			{Name: "account", Kind: assemblerv1.BlockKind_BLOCK_KIND_STATE, Items: []*assemblerv1.Item{
				{Id: "plan", Content: "plan: pro (annual)\nregion: EU\ncase: #4411 open", Trusted: true},
			}},
			{Name: "kb", Kind: assemblerv1.BlockKind_BLOCK_KIND_EVIDENCE, MaxTokens: 130, Items: []*assemblerv1.Item{
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
			{Name: "history", Kind: assemblerv1.BlockKind_BLOCK_KIND_HISTORY, Items: []*assemblerv1.Item{
				{Id: "h1", Role: assemblerv1.Role_ROLE_USER, Content: "Hi, I bought the annual plan last week."},
				{Id: "h2", Role: assemblerv1.Role_ROLE_ASSISTANT, Content: "Let me look up your order.",
					ToolCallIds: []string{"lookup-1"}},
			}},
			{Name: "recent", Kind: assemblerv1.BlockKind_BLOCK_KIND_RECENT_TURNS, Items: []*assemblerv1.Item{
				{Id: "r1", Role: assemblerv1.Role_ROLE_TOOL, ToolCallId: "lookup-1",
					Content: `{"order": "A-1009", "date": "2026-11-15", "plan": "pro-annual"}`},
				{Id: "r2", Role: assemblerv1.Role_ROLE_ASSISTANT,
					Content: "I found order A-1009 from 15 November. How can I help?"},
				{Id: "r3", Role: assemblerv1.Role_ROLE_USER, Content: "I am not happy with it."},
				{Id: "r4", Role: assemblerv1.Role_ROLE_ASSISTANT, Content: "Sorry to hear that. Would you like a refund?"},
			}},
		},
		Query:     query,
		Principal: &assemblerv1.Principal{Id: "user-42", Scopes: []string{"support"}},
		SessionId: "session-42",
	}
}

// checks records named checks and prints each.
type checks struct{ passed, failed int }

func (c *checks) check(ok bool, what string) {
	mark := "ok"
	if ok {
		c.passed++
	} else {
		c.failed++
		mark = "FAIL"
	}
	fmt.Printf("  [%s] %s\n", mark, what)
}

func short(text string) string {
	text = strings.ReplaceAll(text, "\n", `\n`)
	if r := []rune(text); len(r) > truncateAt {
		return string(r[:truncateAt]) + "..."
	}
	return text
}

func ids(values []string) string {
	if len(values) == 0 {
		return "-"
	}
	return strings.Join(values, ",")
}

func call(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	return f(ctx)
}

func listModels(client assemblerv1.AssemblerClient, c *checks) error {
	fmt.Println("== ListModels")
	var resp *assemblerv1.ListModelsResponse
	err := call(func(ctx context.Context) (err error) {
		resp, err = client.ListModels(ctx, &assemblerv1.ListModelsRequest{})
		return err
	})
	if err != nil {
		return err
	}
	listed := false
	for _, m := range resp.Models {
		counting := "exact"
		if !m.Exact {
			counting = fmt.Sprintf("estimated(+%d%%)", m.EstimateMarginPercent)
		}
		if m.Prefix {
			counting += "  prefix"
		}
		fmt.Printf("  %-20s %-12s window %8d  reserve %7d  %s\n",
			m.Name, m.Encoding, m.ContextWindow, m.DefaultOutputReserve, counting)
		listed = listed || m.Name == model
	}
	c.check(listed, "ListModels lists "+model)
	return nil
}

func assemble(client assemblerv1.AssemblerClient, c *checks) error {
	req := demoRequest()
	fmt.Printf("== Assemble %s (%s, budget %d)\n", req.RequestId, req.Model, req.GetMaxInputTokens())
	var resp *assemblerv1.AssembleResponse
	err := call(func(ctx context.Context) (err error) {
		resp, err = client.Assemble(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("model %s, %d messages:\n", resp.Model, len(resp.Messages))
	for i, m := range resp.Messages {
		tools := ""
		if len(m.ToolCallIds) > 0 {
			tools = " [calls " + ids(m.ToolCallIds) + "]"
		}
		if m.ToolCallId != "" {
			tools = " [answers " + m.ToolCallId + "]"
		}
		role := strings.ToLower(strings.TrimPrefix(m.Role.String(), "ROLE_"))
		fmt.Printf("  %2d %-9s %s%s\n", i, role, short(m.Content), tools)
	}
	fmt.Println("decisions:")
	fmt.Printf("  %-10s %-13s %-10s %12s  dropped / filtered / compacted\n", "block", "kind", "outcome", "kept/offered")
	for _, d := range resp.Decisions {
		fmt.Printf("  %-10s %-13s %-10s %12s  %s / %s / %s  (%s)\n", d.Name,
			strings.TrimPrefix(d.Kind.String(), "BLOCK_KIND_"), strings.TrimPrefix(d.Outcome.String(), "OUTCOME_"),
			fmt.Sprintf("%d/%d", d.TokensKept, d.TokensOffered),
			ids(d.DroppedItemIds), ids(d.FilteredItemIds), ids(d.CompactedItemIds), d.Reason)
	}
	u := resp.GetUsage()
	fmt.Printf("usage: budget %d, total %d (static %d, dynamic %d), tokenizer %s, exact %t, output reserve %d, context window %d\n",
		u.GetBudget(), u.GetTotalTokens(), u.GetStaticTokens(), u.GetDynamicTokens(), u.GetTokenizer(), u.GetExact(),
		u.GetOutputReserve(), u.GetContextWindow())
	cache := resp.GetCache()
	hash := cache.GetPrefixHash()
	if len(hash) > 16 {
		hash = hash[:16]
	}
	fmt.Printf("cache: prefix %s, %d messages, %d tokens, %d bytes, hit %t\n", hash, cache.GetPrefixMessageCount(),
		cache.GetPrefixTokens(), cache.GetPrefixBytes(), cache.GetPrefixCacheHit())
	for _, w := range resp.Warnings {
		fmt.Printf("warning %s: %s\n", w.Code, w.Message)
	}

	fmt.Println("checks:")
	c.check(resp.RequestId == req.RequestId, "request_id echoed")
	c.check(len(resp.Messages) > 0, "messages not empty")
	lastIsQuery := false
	if n := len(resp.Messages); n > 0 {
		last := resp.Messages[n-1]
		lastIsQuery = last.Role == assemblerv1.Role_ROLE_USER && last.Content == query
	}
	c.check(lastIsQuery, "last message is the query, as user")
	c.check(u.GetBudget() == budget && u.GetTotalTokens() > 0 && u.GetTotalTokens() <= u.GetBudget(),
		fmt.Sprintf("total_tokens %d <= budget %d (sent %d)", u.GetTotalTokens(), u.GetBudget(), budget))
	inOrder := len(resp.Decisions) == len(req.Blocks)
	for i := 0; inOrder && i < len(req.Blocks); i++ {
		inOrder = resp.Decisions[i].Name == req.Blocks[i].Name
	}
	c.check(inOrder, "one decision per block, in request order")
	filtered := false
	for _, d := range resp.Decisions {
		for _, id := range d.FilteredItemIds {
			filtered = filtered || id == filteredID
		}
	}
	c.check(filtered, fmt.Sprintf("%q is in filtered_item_ids", filteredID))
	rendered := false
	for _, m := range resp.Messages {
		rendered = rendered || strings.Contains(m.Content, filteredText)
	}
	c.check(!rendered, "filtered content is never rendered")
	calls := map[string]bool{}
	answered := true
	for _, m := range resp.Messages {
		for _, id := range m.ToolCallIds {
			calls[id] = true
		}
		if m.Role == assemblerv1.Role_ROLE_TOOL && !calls[m.ToolCallId] {
			answered = false
		}
	}
	c.check(answered, "every tool result follows its call")
	return nil
}

func badRequest(client assemblerv1.AssemblerClient, c *checks) {
	fmt.Println("== Assemble with an unknown model and an empty query")
	req := &assemblerv1.AssembleRequest{RequestId: "clients-demo-bad", Model: "no-such-model"}
	err := call(func(ctx context.Context) error {
		_, err := client.Assemble(ctx, req)
		return err
	})
	st := status.Convert(err)
	fmt.Printf("  status %s: %s\n", st.Code(), st.Message())
	var fields []string
	for _, detail := range st.Details() {
		if bad, ok := detail.(*errdetails.BadRequest); ok {
			for _, v := range bad.FieldViolations {
				fmt.Printf("  violation %s: %s\n", v.Field, v.Description)
				fields = append(fields, v.Field)
			}
		}
	}
	fmt.Println("checks:")
	c.check(st.Code() == codes.InvalidArgument, "status is INVALID_ARGUMENT")
	named := false
	for _, f := range fields {
		named = named || f == "model"
	}
	c.check(named, "BadRequest names the field 'model'")
}

// turn is a conversation message of one text block, with more blocks appended.
func turn(id string, role assemblerv1.Role, text string,
	more ...*assemblerv1.ContentBlock) *assemblerv1.ConversationMessage {
	content := append([]*assemblerv1.ContentBlock{{Block: &assemblerv1.ContentBlock_Text{Text: text}}}, more...)
	return &assemblerv1.ConversationMessage{Id: id, Role: role, Content: content}
}

func toolUse(id, name, input string) *assemblerv1.ContentBlock {
	return &assemblerv1.ContentBlock{Block: &assemblerv1.ContentBlock_ToolUse{
		ToolUse: &assemblerv1.ToolUse{Id: id, Name: name, Input: input}}}
}

func toolResult(id, callID, output string) *assemblerv1.ConversationMessage {
	return &assemblerv1.ConversationMessage{Id: id, Role: assemblerv1.Role_ROLE_TOOL,
		Content: []*assemblerv1.ContentBlock{{Block: &assemblerv1.ContentBlock_ToolResult{
			ToolResult: &assemblerv1.ToolResult{ToolUseId: callID, Output: output}}}}}
}

// conversation is a support chat to compact: a system message, an order lookup with a long
// result, then a policy lookup whose call and result straddle the last preserveRecent messages.
func conversation() []*assemblerv1.ConversationMessage {
	var orders strings.Builder
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&orders, "{\"order\": \"A-%d\", \"plan\": \"pro-annual\", \"status\": \"paid\"}\n", 990+i)
	}
	return []*assemblerv1.ConversationMessage{
		turn("sys", assemblerv1.Role_ROLE_SYSTEM, "You are the support assistant for Acme."),
		turn("u1", assemblerv1.Role_ROLE_USER, "Hi, I bought the annual plan last week. Which orders do I have?"),
		turn("a1", assemblerv1.Role_ROLE_ASSISTANT, "Let me look up your orders.",
			toolUse("orders-1", "find_orders", `{"customer": "user-42"}`)),
		toolResult("t1", "orders-1", orders.String()),
		turn("a2", assemblerv1.Role_ROLE_ASSISTANT, "You have 20 orders; the latest is A-1009 from 15 November."),
		turn("u2", assemblerv1.Role_ROLE_USER, "I am not happy with A-1009. Can I get my money back?"),
		turn("a3", assemblerv1.Role_ROLE_ASSISTANT, "Let me check the refund policy.",
			toolUse("policy-1", "read_policy", `{"topic": "refunds"}`)),
		toolResult("t2", "policy-1", "Annual plans bought in the EU can be refunded in full within 14 days of purchase."),
		turn("a4", assemblerv1.Role_ROLE_ASSISTANT,
			"A-1009 is within 14 days, so a full refund is possible. Shall I start it?"),
		turn("u3", assemblerv1.Role_ROLE_USER, "Yes, please."),
	}
}

// firstText is the text of a message's first block ("" when it is not text).
func firstText(m *assemblerv1.ConversationMessage) string {
	if len(m.Content) == 0 {
		return ""
	}
	return m.Content[0].GetText()
}

// blocks shows a message's content blocks on one line: texts, tool calls and tool results.
func blocks(m *assemblerv1.ConversationMessage) string {
	var parts []string
	for _, b := range m.Content {
		switch {
		case b.GetToolUse() != nil:
			parts = append(parts, "[calls "+b.GetToolUse().Name+" "+b.GetToolUse().Id+"]")
		case b.GetToolResult() != nil:
			parts = append(parts, "[answers "+b.GetToolResult().ToolUseId+"] "+b.GetToolResult().Output)
		default:
			parts = append(parts, b.GetText())
		}
	}
	return short(strings.Join(parts, " "))
}

func messageIDs(msgs []*assemblerv1.ConversationMessage) []string {
	var out []string
	for _, m := range msgs {
		if m.Id != "" {
			out = append(out, m.Id)
		}
	}
	return out
}

func sameMessages(a, b []*assemblerv1.ConversationMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func compact(client assemblerv1.AssemblerClient, c *checks) error {
	input := conversation()
	req := &assemblerv1.CompactRequest{
		RequestId:      "clients-demo-compact",
		Model:          model,
		SessionId:      "session-42",
		Messages:       input,
		TriggerTokens:  proto.Uint32(0),
		PreserveRecent: proto.Uint32(preserveRecent),
		Pinned: []*assemblerv1.PinnedItem{
			{Id: pinnedID, Kind: pinnedKind, Content: "Refund request for order A-1009 (case #4411)."},
		},
	}
	fmt.Printf("== Compact %s (%s, %d messages, trigger 0, preserve_recent %d)\n",
		req.RequestId, req.Model, len(input), preserveRecent)
	var resp *assemblerv1.CompactResponse
	err := call(func(ctx context.Context) (err error) {
		resp, err = client.Compact(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("outcome %s (%s): tokens %d -> %d (target %d), tokenizer %s, exact %t\n",
		strings.TrimPrefix(resp.Outcome.String(), "COMPACT_OUTCOME_"), resp.Reason, resp.TokensBefore,
		resp.TokensAfter, resp.TargetTokens, resp.Tokenizer, resp.Exact)
	for i, m := range resp.Messages {
		role := strings.ToLower(strings.TrimPrefix(m.Role.String(), "ROLE_"))
		fmt.Printf("  %2d %-9s %-4s %s\n", i, role, m.Id, blocks(m))
	}
	p := resp.GetProvenance()
	fmt.Printf("summarized: [%d, %d) %s\n", p.GetStart(), p.GetEnd(), ids(p.GetMessageIds()))

	fmt.Println("checks:")
	c.check(resp.RequestId == req.RequestId, "request_id echoed")
	c.check(resp.Compacted && resp.Outcome == assemblerv1.CompactOutcome_COMPACT_OUTCOME_COMPACTED,
		"outcome is COMPACTED, compacted is true")
	c.check(resp.TokensAfter < resp.TokensBefore && resp.TokensAfter <= resp.TargetTokens,
		fmt.Sprintf("tokens_after %d < tokens_before %d and <= target_tokens %d",
			resp.TokensAfter, resp.TokensBefore, resp.TargetTokens))
	c.check(resp.TriggerTokens == 0 && resp.PreserveRecent == preserveRecent,
		fmt.Sprintf("trigger_tokens 0 and preserve_recent %d applied", preserveRecent))
	c.check(len(resp.Messages) > 0 && proto.Equal(resp.Messages[0], input[0]),
		"the leading system message is kept as it is")
	// Expected: system, continuation (summary), pinned item, then the kept messages verbatim.
	at := -1
	if resp.SummaryIndex != nil {
		at = int(*resp.SummaryIndex)
	}
	c.check(at == 1 && len(resp.Messages) > at && strings.Contains(firstText(resp.Messages[at]), "<summary>"),
		fmt.Sprintf("summary_index %d is the continuation message holding a <summary>", at))
	pinned := at >= 0 && len(resp.Messages) > at+1 && resp.Messages[at+1].Role == assemblerv1.Role_ROLE_USER &&
		strings.HasPrefix(firstText(resp.Messages[at+1]), fmt.Sprintf("<pinned kind=%q id=%q>", pinnedKind, pinnedID))
	c.check(pinned, fmt.Sprintf("the pinned %q item follows the summary as a user message", pinnedID))
	start, end := int(p.GetStart()), int(p.GetEnd())
	covers := p != nil && start == 1 && start < end && end <= len(input)-preserveRecent &&
		strings.Join(p.GetMessageIds(), ",") == strings.Join(messageIDs(input[start:end]), ",")
	c.check(covers, fmt.Sprintf("provenance names input [%d, %d): after the system message, before the %d latest",
		start, end, preserveRecent))
	c.check(covers && at >= 0 && len(resp.Messages) >= at+2 && sameMessages(resp.Messages[at+2:], input[end:]),
		fmt.Sprintf("the %d messages after the cut are kept verbatim", len(input)-end))
	calls := map[string]bool{}
	paired := true
	for _, m := range resp.Messages {
		for _, b := range m.Content {
			if u := b.GetToolUse(); u != nil {
				calls[u.Id] = true
			}
			if r := b.GetToolResult(); r != nil && !calls[r.ToolUseId] {
				paired = false
			}
		}
	}
	c.check(paired, "every tool result follows its call (the cut keeps a call with its result)")
	return nil
}

// memorySubject is a subject no earlier run used: the memory database outlives a run.
func memorySubject() string {
	return fmt.Sprintf("clients/go/%x", time.Now().UnixNano())
}

func contains(values []string, want string) bool {
	for _, v := range values {
		if v == want {
			return true
		}
	}
	return false
}

func isMemoryID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, r := range id {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}

// retain stores one decision that needs memoryScope, retries it with the same key, and returns
// the memory's id ("" when none came back).
func retain(client assemblerv1.AssemblerClient, c *checks, subject string) (string, error) {
	req := &assemblerv1.RetainRequest{
		IdempotencyKey: "clients-demo-1/turn-1",
		Subject:        subject,
		RequiredScopes: []string{memoryScope},
		RequestId:      retainRequestID,
		Turn:           1,
		Observations: []*assemblerv1.Observation{{Type: memoryType, Text: memoryText,
			Facts: []string{"order: A-1009", "refund: full"}}},
	}
	fmt.Printf("== Retain one %s into %s (requires scope %q)\n", memoryType, subject, memoryScope)
	var first, again *assemblerv1.RetainResponse
	err := call(func(ctx context.Context) (err error) {
		first, err = client.Retain(ctx, req)
		return err
	})
	if err == nil {
		err = call(func(ctx context.Context) (err error) {
			again, err = client.Retain(ctx, req)
			return err
		})
	}
	if err != nil {
		return "", err
	}
	fmt.Printf("  memory_ids %s, replayed %t, problems %d; retried: memory_ids %s, replayed %t\n",
		ids(first.MemoryIds), first.Replayed, len(first.Problems), ids(again.MemoryIds), again.Replayed)
	fmt.Println("checks:")
	id := ""
	if len(first.MemoryIds) == 1 {
		id = first.MemoryIds[0]
	}
	c.check(isMemoryID(id), "one memory id, 32 lower-case hex digits")
	c.check(!first.Replayed && len(first.Problems) == 0, "first call stored it: not replayed, no problems")
	c.check(again.Replayed && strings.Join(again.MemoryIds, ",") == strings.Join(first.MemoryIds, ","),
		"a retry with the same idempotency_key is replayed with the same ids")
	return id, nil
}

// recallRequest asks for a recall of subject's memories for a principal holding scopes.
func recallRequest(subject string, scopes []string) *assemblerv1.AssembleRequest {
	return &assemblerv1.AssembleRequest{
		RequestId: "clients-demo-recall",
		Model:     model,
		StaticSegments: []*assemblerv1.Segment{{Id: "system", Kind: assemblerv1.SegmentKind_SEGMENT_KIND_SYSTEM,
			Content: "You are the support assistant for Acme."}},
		Query:     recallQuery,
		Principal: &assemblerv1.Principal{Id: principalID, Scopes: scopes},
		SessionId: "session-42",
		Recall:    &assemblerv1.Recall{Subject: subject},
	}
}

func rendered(resp *assemblerv1.AssembleResponse, text string) bool {
	for _, m := range resp.Messages {
		if strings.Contains(m.Content, text) {
			return true
		}
	}
	return false
}

// recall assembles with a recall of subject, once with the memory's scope and once without.
func recall(client assemblerv1.AssemblerClient, c *checks, subject, id string) error {
	var allowed, denied *assemblerv1.AssembleResponse
	fmt.Printf("== Assemble with recall of %s (scopes %q, then none)\n", subject, memoryScope)
	err := call(func(ctx context.Context) (err error) {
		allowed, err = client.Assemble(ctx, recallRequest(subject, []string{memoryScope}))
		return err
	})
	if err == nil {
		err = call(func(ctx context.Context) (err error) {
			denied, err = client.Assemble(ctx, recallRequest(subject, nil))
			return err
		})
	}
	if err != nil {
		return err
	}
	report := allowed.GetRecall()
	fmt.Printf("  recall into %s: recalled %s, kept %s, dropped %s\n", report.GetBlock(),
		ids(report.GetRecalledIds()), ids(report.GetKeptIds()), ids(report.GetDroppedIds()))
	var memoryBlock *assemblerv1.BlockDecision
	for _, d := range allowed.Decisions {
		fmt.Printf("  decision %s %s %s: kept %s\n", d.Name, strings.TrimPrefix(d.Kind.String(), "BLOCK_KIND_"),
			strings.TrimPrefix(d.Outcome.String(), "OUTCOME_"), ids(d.KeptItemIds))
		if d.Name == recallBlock {
			memoryBlock = d
		}
	}
	fmt.Printf("  without the scope: recalled %s\n", ids(denied.GetRecall().GetRecalledIds()))
	fmt.Println("checks:")
	c.check(report != nil && report.Block == recallBlock, fmt.Sprintf("recall report names block %q", recallBlock))
	c.check(id != "" && contains(report.GetRecalledIds(), id) && contains(report.GetKeptIds(), id) &&
		!contains(report.GetDroppedIds(), id), "the retained memory is recalled and kept")
	c.check(memoryBlock != nil && memoryBlock.Kind == assemblerv1.BlockKind_BLOCK_KIND_MEMORY &&
		id != "" && contains(memoryBlock.KeptItemIds, "memory:"+id),
		fmt.Sprintf("decision %q is a MEMORY block keeping item \"memory:<id>\"", recallBlock))
	c.check(id != "" && rendered(allowed, "memory:"+id) && rendered(allowed, memoryPhrase),
		"the memory is rendered in the prompt")
	c.check(denied.GetRecall() != nil && !contains(denied.GetRecall().GetRecalledIds(), id) &&
		!rendered(denied, memoryPhrase), fmt.Sprintf("without scope %q it is neither recalled nor rendered", memoryScope))
	return nil
}

// listMemories lists subject's memories for a principal with the memory's scope and without one.
func listMemories(client assemblerv1.AssemblerClient, c *checks, subject, id string) error {
	fmt.Printf("== ListMemories of %s (scopes %q, then no principal)\n", subject, memoryScope)
	var scoped, anonymous *assemblerv1.ListMemoriesResponse
	err := call(func(ctx context.Context) (err error) {
		scoped, err = client.ListMemories(ctx, &assemblerv1.ListMemoriesRequest{Subject: subject,
			Principal: &assemblerv1.Principal{Id: principalID, Scopes: []string{memoryScope}}})
		return err
	})
	if err == nil {
		err = call(func(ctx context.Context) (err error) {
			anonymous, err = client.ListMemories(ctx, &assemblerv1.ListMemoriesRequest{Subject: subject})
			return err
		})
	}
	if err != nil {
		return err
	}
	var listed *assemblerv1.StoredMemory
	for _, m := range scoped.Memories {
		fmt.Printf("  %s %s %q scopes %s\n", m.Id, m.Type, m.Title, ids(m.RequiredScopes))
		if m.Id == id {
			listed = m
		}
	}
	fmt.Printf("  hidden %d; without a principal: %d listed, hidden %d\n", scoped.Hidden,
		len(anonymous.Memories), anonymous.Hidden)
	fmt.Println("checks:")
	c.check(len(scoped.Memories) == 1 && listed != nil && scoped.Hidden == 0,
		"with the scope: exactly the retained memory is listed, none hidden")
	c.check(listed != nil && listed.Subject == subject && listed.Type == memoryType &&
		listed.GetObservation().GetText() == memoryText && strings.Join(listed.RequiredScopes, ",") == memoryScope &&
		listed.RequestId == retainRequestID && listed.Turn == 1,
		"it is listed as retained: subject, type, text, required_scopes, request_id, turn")
	c.check(len(anonymous.Memories) == 0 && anonymous.Hidden == 1,
		"without a principal it is hidden (hidden 1), not listed")
	return nil
}

func run() int {
	addr := os.Getenv("CONTEXT_ASSEMBLER_ADDR")
	if len(os.Args) > 2 || (len(os.Args) == 2 && strings.HasPrefix(os.Args[1], "-")) {
		fmt.Fprintln(os.Stderr, "usage: go-client [ADDR]   (default $CONTEXT_ASSEMBLER_ADDR, else "+defaultAddr+")")
		return 2
	}
	if len(os.Args) == 2 {
		addr = os.Args[1]
	}
	if addr == "" {
		addr = defaultAddr
	}
	fmt.Printf("go client -> %s\n", addr)
	conn, err := grpc.Dial(addr, grpc.WithInsecure())
	if err != nil {
		fmt.Printf("go client: cannot dial %s: %v\n", addr, err)
		return 1
	}
	defer conn.Close()
	client := assemblerv1.NewAssemblerClient(conn)

	c := &checks{}
	err = listModels(client, c)
	if err == nil {
		err = assemble(client, c)
	}
	if err == nil {
		badRequest(client, c)
		err = compact(client, c)
	}
	subject, id := memorySubject(), ""
	if err == nil {
		id, err = retain(client, c, subject)
	}
	if err == nil {
		err = recall(client, c, subject, id)
	}
	if err == nil {
		err = listMemories(client, c, subject, id)
	}
	if err != nil {
		st := status.Convert(err)
		fmt.Printf("unexpected RPC error %s: %s\n", st.Code(), st.Message())
		c.check(false, "RPCs answer")
	}
	if c.failed > 0 {
		fmt.Printf("go client: FAILED, %d of %d checks failed\n", c.failed, c.passed+c.failed)
		return 1
	}
	fmt.Printf("go client: all %d checks passed\n", c.passed)
	return 0
}

func main() {
	os.Exit(run())
}
