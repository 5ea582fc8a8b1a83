// Package assembler is the hand-written helper of the context-assembler Go client: a
// connection to the sidecar with sensible defaults (Dial), a wait for its readiness
// (Client.WaitReady), and the rich error details of its answers decoded (ErrorDetails,
// RequestErrorDetails). The messages and the gRPC client are generated, in package assemblerv1.
package assembler

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/context-assembler/context-assembler/clients/go/assemblerv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// Defaults of Dial.
const (
	// KeepaliveTime is how long a connection may be idle before the client pings the sidecar,
	// so a connection that died under a NAT or a restarted pod is noticed.
	KeepaliveTime = 30 * time.Second
	// KeepaliveTimeout is how long a ping may go unanswered before the connection is closed.
	KeepaliveTimeout = 10 * time.Second
	// MaxSendBytes is the largest request sent: the sidecar's default limits.max_request_bytes,
	// so a request it would refuse fails at once, before it is uploaded.
	MaxSendBytes = 4 << 20
	// MaxRecvBytes is the largest answer received: an assembled prompt or a batch of them.
	MaxRecvBytes = 64 << 20
	// ServiceName is the full name of the sidecar's gRPC service.
	ServiceName = "context_assembler.v1.Assembler"
	// UnixAuthority is the :authority sent to a sidecar on a Unix socket (a "unix:" target).
	// The sidecar's HTTP/2 server (Rust's h2) resets every call whose :authority is not a URI
	// authority, such as a socket's path, with RST_STREAM PROTOCOL_ERROR. grpc-go sends
	// "localhost" for "unix:" targets by itself; Dial says so explicitly, so that no version or
	// resolver of grpc-go can send the path instead.
	UnixAuthority = "localhost"
)

// DefaultServiceConfig retries a call answered UNAVAILABLE (a sidecar restarting, draining
// with reason SHUTTING_DOWN, or a memory store reconnecting) up to 4 attempts with
// exponential back-off. Every RPC is safe to retry: the assembling RPCs have no side effects,
// and Retain is idempotent by its idempotency_key. grpc-go releases before 1.40 apply a
// retryPolicy only when the environment holds GRPC_GO_RETRY=on.
const DefaultServiceConfig = `{
  "methodConfig": [{
    "name": [{"service": "` + ServiceName + `"}],
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.1s",
      "maxBackoff": "2s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

// Client is a connection to the sidecar with its generated client and a health client.
type Client struct {
	// AssemblerClient is the generated client of the Assembler service over Conn.
	assemblerv1.AssemblerClient
	// Health is the grpc.health.v1 client over Conn.
	Health grpc_health_v1.HealthClient
	// Conn is the underlying connection; Close closes it.
	Conn *grpc.ClientConn
}

// Option changes how Dial connects.
type Option func(*options)

type options struct {
	tls         *tls.Config
	dialOptions []grpc.DialOption
}

// WithTLS connects with TLS (and a client certificate, when config holds one) instead of
// plaintext.
func WithTLS(config *tls.Config) Option {
	return func(o *options) { o.tls = config }
}

// WithDialOptions adds gRPC dial options after the defaults, so they win over them (for
// example grpc.WithDefaultServiceConfig, or grpc.WithDefaultCallOptions with other sizes).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// Dial connects to the sidecar at target (host:port, unix:/path for a Unix socket, or any gRPC
// target such as dns:///sidecar:50051). It does not wait for the connection: the first call
// does, or WaitReady. The defaults: plaintext (the sidecar listens on the pod's loopback or a
// Unix socket; use WithTLS otherwise), keepalive pings (KeepaliveTime, KeepaliveTimeout),
// UNAVAILABLE retried by DefaultServiceConfig, message sizes MaxSendBytes and MaxRecvBytes, and
// for a unix: target the authority UnixAuthority.
func Dial(target string, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	// grpc.WithInsecure, not credentials/insecure: go.mod names grpc-go 1.33, which has no such
	// package; later releases deprecate WithInsecure but keep it.
	creds := grpc.WithInsecure()
	if o.tls != nil {
		creds = grpc.WithTransportCredentials(credentials.NewTLS(o.tls))
	}
	dialOptions := []grpc.DialOption{
		creds,
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.WithDefaultServiceConfig(DefaultServiceConfig),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(MaxSendBytes), grpc.MaxCallRecvMsgSize(MaxRecvBytes)),
	}
	if strings.HasPrefix(target, "unix:") {
		dialOptions = append(dialOptions, grpc.WithAuthority(UnixAuthority))
	}
	dialOptions = append(dialOptions, o.dialOptions...)
	conn, err := grpc.Dial(target, dialOptions...)
	if err != nil {
		return nil, fmt.Errorf("context-assembler: dial %s: %w", target, err)
	}
	return &Client{
		AssemblerClient: assemblerv1.NewAssemblerClient(conn),
		Health:          grpc_health_v1.NewHealthClient(conn),
		Conn:            conn,
	}, nil
}

// Close closes the connection.
func (c *Client) Close() error {
	return c.Conn.Close()
}

// readyPoll is how often WaitReady asks again.
const readyPoll = 100 * time.Millisecond

// WaitReady returns nil once the sidecar's health service answers SERVING for the Assembler
// service (the sidecar has loaded its tokenizers), or ctx's error when ctx ends first.
func (c *Client) WaitReady(ctx context.Context) error {
	ticker := time.NewTicker(readyPoll)
	defer ticker.Stop()
	for {
		resp, err := c.Health.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: ServiceName},
			grpc.WaitForReady(true))
		if err == nil && resp.GetStatus() == grpc_health_v1.HealthCheckResponse_SERVING {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("context-assembler: not ready: %v: %w", err, ctx.Err())
			}
			return fmt.Errorf("context-assembler: not ready (health %s): %w", resp.GetStatus(), ctx.Err())
		case <-ticker.C:
		}
	}
}
