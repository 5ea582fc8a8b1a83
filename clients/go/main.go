// Command go-client is an example Go client of the context-assembler sidecar.
//
// It lists the models, assembles one realistic prompt, prints its messages, decision report
// and usage, checks that the answer is sane, then checks that a malformed request is refused
// with INVALID_ARGUMENT and a google.rpc.BadRequest. It exits 1 if any check fails.
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
	} else {
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
