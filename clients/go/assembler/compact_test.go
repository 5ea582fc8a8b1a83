package assembler_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/context-assembler/context-assembler/clients/go/assembler"
	pb "github.com/context-assembler/context-assembler/clients/go/assemblerv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

const (
	// How many latest messages stay verbatim (the last three split the policy lookup's call
	// from its result, so the cut must move back one), and the pinned item restored.
	preserveRecent = 3
	pinnedID       = "case"
	pinnedKind     = "task"
)

// turn is a conversation message of one text block, with more blocks appended.
func turn(id string, role pb.Role, text string, more ...*pb.ContentBlock) *pb.ConversationMessage {
	content := append([]*pb.ContentBlock{{Block: &pb.ContentBlock_Text{Text: text}}}, more...)
	return &pb.ConversationMessage{Id: id, Role: role, Content: content}
}

func toolUse(id, name, input string) *pb.ContentBlock {
	return &pb.ContentBlock{Block: &pb.ContentBlock_ToolUse{ToolUse: &pb.ToolUse{Id: id, Name: name, Input: input}}}
}

func toolResult(id, callID, output string) *pb.ConversationMessage {
	return &pb.ConversationMessage{Id: id, Role: pb.Role_ROLE_TOOL, Content: []*pb.ContentBlock{
		{Block: &pb.ContentBlock_ToolResult{ToolResult: &pb.ToolResult{ToolUseId: callID, Output: output}}}}}
}

// conversation is a support chat to compact: a system message, an order lookup with a long
// result, then a policy lookup whose call and result straddle the last preserveRecent messages.
func conversation() []*pb.ConversationMessage {
	var orders strings.Builder
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&orders, "{\"order\": \"A-%d\", \"plan\": \"pro-annual\", \"status\": \"paid\"}\n", 990+i)
	}
	return []*pb.ConversationMessage{
		turn("sys", pb.Role_ROLE_SYSTEM, "You are the support assistant for Acme."),
		turn("u1", pb.Role_ROLE_USER, "Hi, I bought the annual plan last week. Which orders do I have?"),
		turn("a1", pb.Role_ROLE_ASSISTANT, "Let me look up your orders.",
			toolUse("orders-1", "find_orders", `{"customer": "user-42"}`)),
		toolResult("t1", "orders-1", orders.String()),
		turn("a2", pb.Role_ROLE_ASSISTANT, "You have 20 orders; the latest is A-1009 from 15 November."),
		turn("u2", pb.Role_ROLE_USER, "I am not happy with A-1009. Can I get my money back?"),
		turn("a3", pb.Role_ROLE_ASSISTANT, "Let me check the refund policy.",
			toolUse("policy-1", "read_policy", `{"topic": "refunds"}`)),
		toolResult("t2", "policy-1", "Annual plans bought in the EU can be refunded in full within 14 days of purchase."),
		turn("a4", pb.Role_ROLE_ASSISTANT, "A-1009 is within 14 days, so a full refund is possible. Shall I start it?"),
		turn("u3", pb.Role_ROLE_USER, "Yes, please."),
	}
}

// firstText is the text of a message's first block ("" when it is not text).
func firstText(m *pb.ConversationMessage) string {
	if len(m.GetContent()) == 0 {
		return ""
	}
	return m.GetContent()[0].GetText()
}

func messageIDs(msgs []*pb.ConversationMessage) string {
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.GetId())
	}
	return strings.Join(ids, ",")
}

func TestCompactSummarizesTheOlderTurnsAndKeepsTheRecentVerbatim(t *testing.T) {
	c := withMemory(t)
	input := conversation()
	req := &pb.CompactRequest{
		RequestId:      "go-compact",
		Model:          model,
		SessionId:      unique("go-compact-session"),
		Messages:       input,
		TriggerTokens:  proto.Uint32(0),
		PreserveRecent: proto.Uint32(preserveRecent),
		Pinned: []*pb.PinnedItem{
			{Id: pinnedID, Kind: pinnedKind, Content: "Refund request for order A-1009 (case #4411)."},
		},
	}
	resp, err := c.Compact(ctx(t), req)
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if resp.GetRequestId() != req.GetRequestId() {
		t.Errorf("request_id %q, want %q", resp.GetRequestId(), req.GetRequestId())
	}
	if !resp.GetCompacted() || resp.GetOutcome() != pb.CompactOutcome_COMPACT_OUTCOME_COMPACTED {
		t.Fatalf("outcome %s (%s), compacted %t; want COMPACTED", resp.GetOutcome(), resp.GetReason(), resp.GetCompacted())
	}
	if resp.GetTokensAfter() >= resp.GetTokensBefore() || resp.GetTokensAfter() > resp.GetTargetTokens() {
		t.Errorf("tokens %d -> %d, target %d", resp.GetTokensBefore(), resp.GetTokensAfter(), resp.GetTargetTokens())
	}
	if resp.GetTriggerTokens() != 0 || resp.GetPreserveRecent() != preserveRecent {
		t.Errorf("trigger_tokens %d, preserve_recent %d applied", resp.GetTriggerTokens(), resp.GetPreserveRecent())
	}
	out := resp.GetMessages()
	if len(out) == 0 || !proto.Equal(out[0], input[0]) {
		t.Fatalf("the leading system message is not kept as it is: %v", out)
	}
	// Expected: system, the continuation (summary), the pinned item, the kept messages verbatim.
	if resp.SummaryIndex == nil || resp.GetSummaryIndex() != 1 || len(out) < 3 ||
		!strings.Contains(firstText(out[1]), "<summary>") {
		t.Fatalf("summary_index %v: want 1, a continuation holding a <summary>", resp.SummaryIndex)
	}
	if out[2].GetRole() != pb.Role_ROLE_USER ||
		!strings.HasPrefix(firstText(out[2]), fmt.Sprintf("<pinned kind=%q id=%q>", pinnedKind, pinnedID)) {
		t.Errorf("message 2 %s %q: want the pinned item as a user message", out[2].GetRole(), firstText(out[2]))
	}
	p := resp.GetProvenance()
	start, end := int(p.GetStart()), int(p.GetEnd())
	if start != 1 || end <= start || end > len(input)-preserveRecent {
		t.Fatalf("provenance [%d, %d): want from 1 to before the %d latest", start, end, preserveRecent)
	}
	if got := strings.Join(p.GetMessageIds(), ","); got != messageIDs(input[start:end]) {
		t.Errorf("provenance names %s, want %s", got, messageIDs(input[start:end]))
	}
	kept := out[3:]
	if len(kept) != len(input)-end {
		t.Fatalf("%d messages after the pinned item, want the %d after the cut", len(kept), len(input)-end)
	}
	for i, m := range kept {
		if !proto.Equal(m, input[end+i]) {
			t.Errorf("kept message %d differs from input %d", i, end+i)
		}
	}
	calls := map[string]bool{}
	for i, m := range out {
		for _, b := range m.GetContent() {
			if u := b.GetToolUse(); u != nil {
				calls[u.GetId()] = true
			}
			if r := b.GetToolResult(); r != nil && !calls[r.GetToolUseId()] {
				t.Errorf("message %d answers %q before its call", i, r.GetToolUseId())
			}
		}
	}
}

func TestCompactInvalidArgumentNamesTheField(t *testing.T) {
	c := withMemory(t)
	_, err := c.Compact(ctx(t), &pb.CompactRequest{RequestId: "go-compact-bad", Model: "no-such-model",
		Messages: conversation()})
	wantViolation(t, mustFail(t, err, codes.InvalidArgument), "model")
}
