package assembler_test

import (
	"strings"
	"testing"

	"github.com/context-assembler/context-assembler/clients/go/assembler"
	pb "github.com/context-assembler/context-assembler/clients/go/assemblerv1"
	"google.golang.org/grpc/codes"
)

const (
	// The principal, the one scope the retained memory requires, its type and text, and a
	// phrase only that text holds.
	principalID  = "user-42"
	memoryScope  = "support"
	memoryType   = "decision"
	memoryText   = "Refund approved for order A-1009: the annual plan was bought within the 14-day window."
	memoryPhrase = "within the 14-day window"
	recallBlock  = "recalled_memories" // Recall.block left empty names this block
	retainID     = "go-retain"
)

func retainRequest(subject string) *pb.RetainRequest {
	return &pb.RetainRequest{
		IdempotencyKey: subject + "/turn-1",
		Subject:        subject,
		RequiredScopes: []string{memoryScope},
		RequestId:      retainID,
		Turn:           1,
		Observations: []*pb.Observation{{Type: memoryType, Text: memoryText,
			Facts: []string{"order: A-1009", "refund: full"}}},
	}
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

func rendered(resp *pb.AssembleResponse, text string) bool {
	for _, m := range resp.GetMessages() {
		if strings.Contains(m.GetContent(), text) {
			return true
		}
	}
	return false
}

// recallRequest asks for a recall of subject's memories for a principal holding scopes.
func recallRequest(subject string, scopes []string) *pb.AssembleRequest {
	req := minimal("go-recall", "Was the refund for order A-1009 approved?")
	req.Principal = &pb.Principal{Id: principalID, Scopes: scopes}
	req.Recall = &pb.Recall{Subject: subject}
	return req
}

// TestMemoryRoundTrip retains a memory that needs a scope (and retries it), recalls it for a
// principal with the scope and without, lists it, forgets it, and lists nothing.
func TestMemoryRoundTrip(t *testing.T) {
	c := withMemory(t)
	subject := unique("clients/go")

	first, err := c.Retain(ctx(t), retainRequest(subject))
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if len(first.GetMemoryIds()) != 1 || !isMemoryID(first.GetMemoryIds()[0]) {
		t.Fatalf("memory_ids %v: want one id of 32 lower-case hex digits", first.GetMemoryIds())
	}
	id := first.GetMemoryIds()[0]
	if first.GetReplayed() || len(first.GetProblems()) != 0 {
		t.Errorf("first Retain: replayed %t, problems %v; want stored", first.GetReplayed(), first.GetProblems())
	}
	again, err := c.Retain(ctx(t), retainRequest(subject))
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if !again.GetReplayed() || strings.Join(again.GetMemoryIds(), ",") != id {
		t.Errorf("retry: replayed %t, ids %v; want replayed, [%s]", again.GetReplayed(), again.GetMemoryIds(), id)
	}

	allowed, err := c.Assemble(ctx(t), recallRequest(subject, []string{memoryScope}))
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	report := allowed.GetRecall()
	if report.GetBlock() != recallBlock || !contains(report.GetRecalledIds(), id) ||
		!contains(report.GetKeptIds(), id) || contains(report.GetDroppedIds(), id) {
		t.Errorf("recall %v: want block %q recalling and keeping %s", report, recallBlock, id)
	}
	var memoryBlock *pb.BlockDecision
	for _, d := range allowed.GetDecisions() {
		if d.GetName() == recallBlock {
			memoryBlock = d
		}
	}
	if memoryBlock.GetKind() != pb.BlockKind_BLOCK_KIND_MEMORY || !contains(memoryBlock.GetKeptItemIds(), "memory:"+id) {
		t.Errorf("decision %v: want a MEMORY block %q keeping memory:%s", memoryBlock, recallBlock, id)
	}
	if !rendered(allowed, "memory:"+id) || !rendered(allowed, memoryPhrase) {
		t.Error("the recalled memory is not rendered in the prompt")
	}
	denied, err := c.Assemble(ctx(t), recallRequest(subject, nil))
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if denied.GetRecall() == nil || contains(denied.GetRecall().GetRecalledIds(), id) || rendered(denied, memoryPhrase) {
		t.Errorf("without scope %q: recall %v; want it neither recalled nor rendered", memoryScope, denied.GetRecall())
	}

	scoped, err := c.ListMemories(ctx(t), &pb.ListMemoriesRequest{Subject: subject,
		Principal: &pb.Principal{Id: principalID, Scopes: []string{memoryScope}}})
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if len(scoped.GetMemories()) != 1 || scoped.GetHidden() != 0 {
		t.Fatalf("with the scope: %d listed, %d hidden; want 1, 0", len(scoped.GetMemories()), scoped.GetHidden())
	}
	m := scoped.GetMemories()[0]
	if m.GetId() != id || m.GetSubject() != subject || m.GetType() != memoryType ||
		m.GetObservation().GetText() != memoryText || strings.Join(m.GetRequiredScopes(), ",") != memoryScope ||
		m.GetRequestId() != retainID || m.GetTurn() != 1 {
		t.Errorf("listed %v: want it as retained", m)
	}
	anonymous, err := c.ListMemories(ctx(t), &pb.ListMemoriesRequest{Subject: subject})
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if len(anonymous.GetMemories()) != 0 || anonymous.GetHidden() != 1 {
		t.Errorf("without a principal: %d listed, %d hidden; want 0, 1", len(anonymous.GetMemories()), anonymous.GetHidden())
	}

	forgot, err := c.Forget(ctx(t), &pb.ForgetRequest{Subject: subject, Ids: []string{id, "0123456789abcdef0123456789abcdef"}})
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if forgot.GetDeleted() != 1 || forgot.GetNotFound() != 1 {
		t.Errorf("Forget: deleted %d, not_found %d; want 1, 1", forgot.GetDeleted(), forgot.GetNotFound())
	}
	after, err := c.ListMemories(ctx(t), &pb.ListMemoriesRequest{Subject: subject,
		Principal: &pb.Principal{Id: principalID, Scopes: []string{memoryScope}}})
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if len(after.GetMemories())+int(after.GetHidden()) != 0 {
		t.Errorf("after Forget: %d listed, %d hidden; want none", len(after.GetMemories()), after.GetHidden())
	}
}

func TestForgetWithoutSubjectNamesIt(t *testing.T) {
	c := withMemory(t)
	_, err := c.Forget(ctx(t), &pb.ForgetRequest{Ids: []string{"0123456789abcdef0123456789abcdef"}})
	wantViolation(t, mustFail(t, err, codes.InvalidArgument), "subject")
}

func TestRetainWithoutAMemoryStoreIsMemoryDisabled(t *testing.T) {
	c := withoutMemory(t)
	_, err := c.Retain(ctx(t), retainRequest(unique("clients/go")))
	d := mustFail(t, err, codes.FailedPrecondition)
	wantErrorInfo(t, d, assembler.ReasonMemoryDisabled)
}
