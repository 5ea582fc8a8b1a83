package assembler

import (
	"fmt"
	"time"

	"github.com/context-assembler/context-assembler/clients/go/assemblerv1"
	"github.com/golang/protobuf/proto"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is google.rpc.ErrorInfo's domain in the sidecar's errors.
const Domain = "context-assembler"

// google.rpc.ErrorInfo reasons the sidecar answers (proto/context_assembler/v1/assembler.proto
// documents each with its code and metadata).
const (
	// ReasonBudgetOverflow (FAILED_PRECONDITION): what may never be cut does not fit the
	// budget; the Details carry a BudgetOverflowDetail.
	ReasonBudgetOverflow = "BUDGET_OVERFLOW"
	// ReasonTemplateRefused (FAILED_PRECONDITION): the model's chat template refuses the prompt.
	ReasonTemplateRefused = "TEMPLATE_REFUSED"
	// ReasonMemoryDisabled (FAILED_PRECONDITION): the sidecar runs without a memory store.
	ReasonMemoryDisabled = "MEMORY_DISABLED"
	// ReasonRequestTooLarge (RESOURCE_EXHAUSTED): the request's bytes are over the limit.
	ReasonRequestTooLarge = "REQUEST_TOO_LARGE"
	// ReasonRequestTooComplex (RESOURCE_EXHAUSTED): the request would decode too large.
	ReasonRequestTooComplex = "REQUEST_TOO_COMPLEX"
	// ReasonTooManyBlocks (RESOURCE_EXHAUSTED): more blocks than limits.max_blocks.
	ReasonTooManyBlocks = "TOO_MANY_BLOCKS"
	// ReasonTooManyItems (RESOURCE_EXHAUSTED): more items than limits.max_items.
	ReasonTooManyItems = "TOO_MANY_ITEMS"
	// ReasonTooManyRequests (RESOURCE_EXHAUSTED): a batch over limits.max_batch_requests.
	ReasonTooManyRequests = "TOO_MANY_REQUESTS"
	// ReasonOverloaded (RESOURCE_EXHAUSTED): shed under load; retry after the RetryInfo delay.
	ReasonOverloaded = "OVERLOADED"
	// ReasonShuttingDown (UNAVAILABLE): the sidecar is draining; retry on another instance.
	ReasonShuttingDown = "SHUTTING_DOWN"
	// ReasonMemoryUnavailable (UNAVAILABLE): the memory store cannot answer; retry the same
	// call after the RetryInfo delay.
	ReasonMemoryUnavailable = "MEMORY_UNAVAILABLE"
	// ReasonClaimDenied (PERMISSION_DENIED): a client certificate may not make this claim.
	ReasonClaimDenied = "CLAIM_DENIED"
)

// Details are the structured details of an error the sidecar answered. A detail the error
// does not carry is nil; the generated getters are nil-safe, so
// d.ErrorInfo.GetMetadata()["limit"] or d.BadRequest.GetFieldViolations() need no check.
type Details struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the status message.
	Message string
	// BadRequest names each bad field of an INVALID_ARGUMENT.
	BadRequest *errdetails.BadRequest
	// ErrorInfo holds the reason (one of the Reason constants), Domain and metadata.
	ErrorInfo *errdetails.ErrorInfo
	// RetryInfo says how long to wait before retrying.
	RetryInfo *errdetails.RetryInfo
	// BudgetOverflow breaks down an infeasible budget (reason BUDGET_OVERFLOW).
	BudgetOverflow *assemblerv1.BudgetOverflowDetail
}

// Reason is the ErrorInfo reason, or "" when there is none.
func (d *Details) Reason() string {
	return d.ErrorInfo.GetReason()
}

// RetryDelay is the RetryInfo delay, and whether there is one.
func (d *Details) RetryDelay() (time.Duration, bool) {
	if d.RetryInfo.GetRetryDelay() == nil {
		return 0, false
	}
	return d.RetryInfo.GetRetryDelay().AsDuration(), true
}

// Violation is the description of the BadRequest violation of field (a path such as
// "model" or "blocks[2].items[0].id"), and whether there is one.
func (d *Details) Violation(field string) (string, bool) {
	for _, v := range d.BadRequest.GetFieldViolations() {
		if v.GetField() == field {
			return v.GetDescription(), true
		}
	}
	return "", false
}

// String formats the code, the reason and the message.
func (d *Details) String() string {
	if reason := d.Reason(); reason != "" {
		return fmt.Sprintf("%s (%s): %s", d.Code, reason, d.Message)
	}
	return fmt.Sprintf("%s: %s", d.Code, d.Message)
}

// ErrorDetails decodes the status of an error a call returned: its code, message and
// details. It is nil when err is nil; an error that is not a gRPC status has code Unknown
// and no details.
func ErrorDetails(err error) *Details {
	if err == nil {
		return nil
	}
	return statusDetails(status.Convert(err))
}

// RequestErrorDetails decodes the error of one request of a batch or stream: the same
// details a unary call would have answered, from its status_details (an encoded
// google.rpc.Status). It fails when status_details does not decode.
func RequestErrorDetails(e *assemblerv1.RequestError) (*Details, error) {
	if e == nil {
		return nil, nil
	}
	if len(e.GetStatusDetails()) == 0 {
		return &Details{Code: codes.Code(e.GetCode()), Message: e.GetMessage()}, nil
	}
	var st spb.Status
	if err := proto.Unmarshal(e.GetStatusDetails(), &st); err != nil {
		return nil, fmt.Errorf("context-assembler: RequestError.status_details: %w", err)
	}
	return statusDetails(status.FromProto(&st)), nil
}

// statusDetails sorts a status's details into Details; details of other types are skipped.
func statusDetails(st *status.Status) *Details {
	d := &Details{Code: st.Code(), Message: st.Message()}
	for _, detail := range st.Details() {
		switch detail := detail.(type) {
		case *errdetails.BadRequest:
			d.BadRequest = detail
		case *errdetails.ErrorInfo:
			d.ErrorInfo = detail
		case *errdetails.RetryInfo:
			d.RetryInfo = detail
		case *assemblerv1.BudgetOverflowDetail:
			d.BudgetOverflow = detail
		}
	}
	return d
}
