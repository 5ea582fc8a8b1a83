package assembler_test

// Dial's defaults against an in-process gRPC server that plays the sidecar: UNAVAILABLE is
// retried, WaitReady waits for SERVING, a request over MaxSendBytes fails before it is sent.

import (
	"context"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/context-assembler/context-assembler/clients/go/assembler"
	pb "github.com/context-assembler/context-assembler/clients/go/assemblerv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// flaky answers ListModels UNAVAILABLE until it has been called failures+1 times.
type flaky struct {
	pb.UnimplementedAssemblerServer
	failures int32
	calls    int32
}

func (f *flaky) ListModels(context.Context, *pb.ListModelsRequest) (*pb.ListModelsResponse, error) {
	if atomic.AddInt32(&f.calls, 1) <= f.failures {
		return nil, status.Error(codes.Unavailable, "restarting")
	}
	return &pb.ListModelsResponse{Models: []*pb.ModelInfo{{Name: "gpt-4o"}}}, nil
}

// fake serves f and a health service on 127.0.0.1:0 until the test ends.
func fake(t *testing.T, f *flaky) (string, *health.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterAssemblerServer(srv, f)
	h := health.NewServer()
	h.SetServingStatus(assembler.ServiceName, grpc_health_v1.HealthCheckResponse_NOT_SERVING)
	grpc_health_v1.RegisterHealthServer(srv, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), h
}

// retriesOn says whether this grpc-go applies a service config's retryPolicy: always from
// 1.40, before only with GRPC_GO_RETRY=on.
func retriesOn() bool {
	var major, minor int
	parts := strings.SplitN(grpc.Version, ".", 3)
	if len(parts) >= 2 {
		major, minor = atoi(parts[0]), atoi(parts[1])
	}
	return major > 1 || minor >= 40 || strings.EqualFold(os.Getenv("GRPC_GO_RETRY"), "on")
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			break
		}
		n = n*10 + int(r-'0')
	}
	return n
}

func TestDialRetriesUnavailable(t *testing.T) {
	if !retriesOn() {
		t.Skipf("grpc-go %s applies retryPolicy only with GRPC_GO_RETRY=on", grpc.Version)
	}
	f := &flaky{failures: 2}
	addr, _ := fake(t, f)
	c, err := assembler.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.ListModels(ctx(t), &pb.ListModelsRequest{})
	if err != nil {
		t.Fatalf("after 2 UNAVAILABLE: %v; want the third attempt to answer", err)
	}
	if got := atomic.LoadInt32(&f.calls); got != 3 || len(resp.GetModels()) != 1 {
		t.Errorf("%d attempts, %d models; want 3 attempts", got, len(resp.GetModels()))
	}
	// maxAttempts is 4: a server that keeps failing is given up on after the fourth.
	f2 := &flaky{failures: 100}
	addr2, _ := fake(t, f2)
	c2, err := assembler.Dial(addr2)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, err = c2.ListModels(ctx(t), &pb.ListModelsRequest{})
	if status.Code(err) != codes.Unavailable || atomic.LoadInt32(&f2.calls) != 4 {
		t.Errorf("%v after %d attempts; want UNAVAILABLE after 4", err, atomic.LoadInt32(&f2.calls))
	}
}

func TestWaitReadyWaitsForServing(t *testing.T) {
	addr, h := fake(t, &flaky{})
	c, err := assembler.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.WaitReady(short); err == nil {
		t.Fatal("WaitReady returned nil while NOT_SERVING")
	}
	time.AfterFunc(200*time.Millisecond, func() {
		h.SetServingStatus(assembler.ServiceName, grpc_health_v1.HealthCheckResponse_SERVING)
	})
	if err := c.WaitReady(ctx(t)); err != nil {
		t.Fatalf("WaitReady after SERVING: %v", err)
	}
}

func TestDialRefusesARequestOverMaxSendBytes(t *testing.T) {
	addr, _ := fake(t, &flaky{})
	c, err := assembler.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := &pb.AssembleRequest{Model: "gpt-4o", Query: strings.Repeat("x", assembler.MaxSendBytes)}
	_, err = c.Assemble(ctx(t), big)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a request over MaxSendBytes: %v, want RESOURCE_EXHAUSTED from the client", err)
	}
}
