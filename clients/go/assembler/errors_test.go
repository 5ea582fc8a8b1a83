package assembler_test

// The decoder on statuses built here: details a client cannot make the sidecar answer on
// purpose (OVERLOADED, SHUTTING_DOWN, MEMORY_UNAVAILABLE, CLAIM_DENIED), in a unary error and
// in a batch's RequestError.

import (
	"errors"
	"testing"
	"time"

	"github.com/context-assembler/context-assembler/clients/go/assembler"
	pb "github.com/context-assembler/context-assembler/clients/go/assemblerv1"
	"github.com/golang/protobuf/proto"
	"github.com/golang/protobuf/ptypes"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sidecarStatus is a status as the sidecar builds one: an ErrorInfo of our domain, and more.
func sidecarStatus(t *testing.T, code codes.Code, reason string, more ...proto.Message) *status.Status {
	t.Helper()
	details := append([]proto.Message{&errdetails.ErrorInfo{Reason: reason, Domain: assembler.Domain,
		Metadata: map[string]string{"limit": "64", "value": "65"}}}, more...)
	st, err := status.New(code, "refused: "+reason).WithDetails(details...)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// requestError is st as a batch or a stream carries it.
func requestError(t *testing.T, st *status.Status) *pb.RequestError {
	t.Helper()
	bytes, err := proto.Marshal(st.Proto())
	if err != nil {
		t.Fatal(err)
	}
	return &pb.RequestError{Code: int32(st.Code()), Message: st.Message(), StatusDetails: bytes}
}

// both decodes st as a unary error and as a RequestError, and fails unless they agree.
func both(t *testing.T, st *status.Status) *assembler.Details {
	t.Helper()
	unary := assembler.ErrorDetails(st.Err())
	batch, err := assembler.RequestErrorDetails(requestError(t, st))
	if err != nil {
		t.Fatal(err)
	}
	if unary.String() != batch.String() || !proto.Equal(unary.ErrorInfo, batch.ErrorInfo) ||
		!proto.Equal(unary.RetryInfo, batch.RetryInfo) || !proto.Equal(unary.BadRequest, batch.BadRequest) ||
		!proto.Equal(unary.BudgetOverflow, batch.BudgetOverflow) {
		t.Fatalf("unary %s and RequestError %s decode differently", unary, batch)
	}
	if unary.Code != st.Code() || unary.Message != st.Message() {
		t.Fatalf("decoded %s, want %s: %s", unary, st.Code(), st.Message())
	}
	return unary
}

func TestDecodeOverloadedRetryInfo(t *testing.T) {
	delay := 50 * time.Millisecond
	st := sidecarStatus(t, codes.ResourceExhausted, assembler.ReasonOverloaded,
		&errdetails.RetryInfo{RetryDelay: ptypes.DurationProto(delay)})
	d := both(t, st)
	if d.Reason() != assembler.ReasonOverloaded || d.ErrorInfo.GetMetadata()["limit"] != "64" {
		t.Errorf("ErrorInfo %v", d.ErrorInfo)
	}
	if got, ok := d.RetryDelay(); !ok || got != delay {
		t.Errorf("RetryDelay %v, %t; want %v", got, ok, delay)
	}
}

func TestDecodeShuttingDownAndMemoryUnavailable(t *testing.T) {
	d := both(t, sidecarStatus(t, codes.Unavailable, assembler.ReasonShuttingDown))
	if d.Reason() != assembler.ReasonShuttingDown || d.RetryInfo != nil || d.BadRequest != nil {
		t.Errorf("SHUTTING_DOWN decoded as %s, RetryInfo %v, BadRequest %v", d, d.RetryInfo, d.BadRequest)
	}
	if _, ok := d.RetryDelay(); ok {
		t.Error("RetryDelay present without a RetryInfo")
	}
	d = both(t, sidecarStatus(t, codes.Unavailable, assembler.ReasonMemoryUnavailable,
		&errdetails.RetryInfo{RetryDelay: ptypes.DurationProto(time.Second)}))
	if got, ok := d.RetryDelay(); d.Reason() != assembler.ReasonMemoryUnavailable || !ok || got != time.Second {
		t.Errorf("MEMORY_UNAVAILABLE decoded as %s, delay %v %t", d, got, ok)
	}
}

func TestDecodeBadRequestAndBudgetOverflow(t *testing.T) {
	st, err := status.New(codes.InvalidArgument, "invalid request").WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: "blocks[2].items[0].id", Description: "duplicate id"}}})
	if err != nil {
		t.Fatal(err)
	}
	d := both(t, st)
	if why, ok := d.Violation("blocks[2].items[0].id"); !ok || why != "duplicate id" {
		t.Errorf("Violation: %q, %t", why, ok)
	}
	if _, ok := d.Violation("model"); ok {
		t.Error("a field not named is found")
	}
	overflow := &pb.BudgetOverflowDetail{Model: "gpt-4o", Budget: 200, NonCuttableTokens: 900,
		Blocks: []*pb.BlockNeed{{Name: "account", Index: 1, Kind: pb.BlockKind_BLOCK_KIND_STATE, Tokens: 800}}}
	d = both(t, sidecarStatus(t, codes.FailedPrecondition, assembler.ReasonBudgetOverflow, overflow))
	if !proto.Equal(d.BudgetOverflow, overflow) {
		t.Errorf("BudgetOverflow %v, want %v", d.BudgetOverflow, overflow)
	}
}

func TestDecodeWithoutDetails(t *testing.T) {
	if assembler.ErrorDetails(nil) != nil {
		t.Error("ErrorDetails(nil) is not nil")
	}
	d := assembler.ErrorDetails(errors.New("not a status"))
	if d.Code != codes.Unknown || d.ErrorInfo != nil || d.Reason() != "" {
		t.Errorf("a plain error decodes as %s", d)
	}
	d, err := assembler.RequestErrorDetails(&pb.RequestError{Code: int32(codes.Internal), Message: "boom"})
	if err != nil || d.Code != codes.Internal || d.Message != "boom" {
		t.Errorf("a RequestError without status_details: %v, %v", d, err)
	}
	if _, err := assembler.RequestErrorDetails(&pb.RequestError{Code: 3, StatusDetails: []byte{0xff, 0xff}}); err == nil {
		t.Error("status_details that do not decode are accepted")
	}
}
