package assembler_test

// The package's tests against a real sidecar: every RPC and every error detail a client can
// trigger. The servers come from the environment: CONTEXT_ASSEMBLER_ADDR (with a memory
// store), CONTEXT_ASSEMBLER_ADDR_NO_MEMORY (without one) and CONTEXT_ASSEMBLER_UNIX_ADDR (on a
// Unix socket, unix:/path). Unset, these tests skip, unless CONTEXT_ASSEMBLER_REQUIRE_SERVER=1
// (CI) makes that a failure.

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/context-assembler/context-assembler/clients/go/assembler"
	pb "github.com/context-assembler/context-assembler/clients/go/assemblerv1"
	"google.golang.org/grpc/codes"
)

const (
	// envAddr is the address of a sidecar with a memory store.
	envAddr = "CONTEXT_ASSEMBLER_ADDR"
	// envAddrNoMemory is the address of a sidecar without one.
	envAddrNoMemory = "CONTEXT_ASSEMBLER_ADDR_NO_MEMORY"
	// envUnixAddr is the target of a sidecar listening on a Unix socket (unix:/path).
	envUnixAddr = "CONTEXT_ASSEMBLER_UNIX_ADDR"
	// envRequire, set to 1, makes a missing address a failure instead of a skip.
	envRequire = "CONTEXT_ASSEMBLER_REQUIRE_SERVER"
	// readyTimeout bounds the wait for health SERVING; rpcTimeout bounds each call.
	readyTimeout = 60 * time.Second
	rpcTimeout   = 10 * time.Second
	model        = "gpt-4o"
)

// sidecar dials the server named by the environment variable env and waits until it is
// SERVING; it skips the test when env is unset (fails when envRequire is 1).
func sidecar(t *testing.T, env string) *assembler.Client {
	t.Helper()
	addr := os.Getenv(env)
	if addr == "" {
		if os.Getenv(envRequire) == "1" {
			t.Fatalf("%s is not set, and %s=1 requires a server", env, envRequire)
		}
		t.Skipf("%s is not set: start a sidecar and set it to run this test", env)
	}
	client, err := assembler.Dial(addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := client.WaitReady(ctx); err != nil {
		t.Fatalf("the sidecar at %s (%s): %v", addr, env, err)
	}
	return client
}

// withMemory is the sidecar with a memory store; withoutMemory the one without.
func withMemory(t *testing.T) *assembler.Client    { return sidecar(t, envAddr) }
func withoutMemory(t *testing.T) *assembler.Client { return sidecar(t, envAddrNoMemory) }

// ctx is a context bounded by rpcTimeout, cancelled when the test ends.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	t.Cleanup(cancel)
	return c
}

// unique is a name no earlier run used (the memory database may outlive a run).
func unique(prefix string) string {
	return fmt.Sprintf("%s/%x", prefix, time.Now().UnixNano())
}

// mustFail returns the decoded details of err, failing the test when err is nil or its code
// is not want.
func mustFail(t *testing.T, err error, want codes.Code) *assembler.Details {
	t.Helper()
	if err == nil {
		t.Fatalf("the call succeeded; want %s", want)
	}
	d := assembler.ErrorDetails(err)
	if d.Code != want {
		t.Fatalf("code %s, want %s (%s)", d.Code, want, d.Message)
	}
	return d
}

// wantErrorInfo fails the test unless d carries an ErrorInfo of our domain with reason.
func wantErrorInfo(t *testing.T, d *assembler.Details, reason string) {
	t.Helper()
	if d.ErrorInfo == nil {
		t.Fatalf("no google.rpc.ErrorInfo in %s", d)
	}
	if d.Reason() != reason || d.ErrorInfo.GetDomain() != assembler.Domain {
		t.Fatalf("ErrorInfo %s/%s, want %s/%s", d.ErrorInfo.GetDomain(), d.Reason(), assembler.Domain, reason)
	}
}

// wantViolation fails the test unless d is a BadRequest naming field.
func wantViolation(t *testing.T, d *assembler.Details, field string) {
	t.Helper()
	if d.BadRequest == nil {
		t.Fatalf("no google.rpc.BadRequest in %s", d)
	}
	if _, ok := d.Violation(field); !ok {
		t.Fatalf("BadRequest names %v, not %q", d.BadRequest.GetFieldViolations(), field)
	}
}

// minimal is the smallest valid request: a system segment and a query.
func minimal(id, query string) *pb.AssembleRequest {
	return &pb.AssembleRequest{
		RequestId: id,
		Model:     model,
		StaticSegments: []*pb.Segment{{Id: "system", Kind: pb.SegmentKind_SEGMENT_KIND_SYSTEM,
			Content: "You are the support assistant for Acme."}},
		Query: query,
	}
}

// invalid is a request the sidecar refuses with INVALID_ARGUMENT naming "model".
func invalid(id string) *pb.AssembleRequest {
	req := minimal(id, "Where is my order?")
	req.Model = "no-such-model"
	return req
}

func contains(values []string, want string) bool {
	for _, v := range values {
		if v == want {
			return true
		}
	}
	return false
}
