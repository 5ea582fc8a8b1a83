package assembler_test

// A sidecar on a Unix socket, through Dial's defaults: the calls arrive. The sidecar's HTTP/2
// server resets every call whose :authority is a socket's path (RST_STREAM PROTOCOL_ERROR).
// grpc-go itself sends "localhost" for a unix: target, and Dial sets UnixAuthority as well;
// this test fails if a change of either sends anything the sidecar refuses.

import (
	"testing"

	"github.com/context-assembler/context-assembler/clients/go/assembler"
	pb "github.com/context-assembler/context-assembler/clients/go/assemblerv1"
)

func TestDialReachesASidecarOnAUnixSocket(t *testing.T) {
	c := sidecar(t, envUnixAddr)
	resp, err := c.CountTokens(ctx(t), &pb.CountTokensRequest{
		Tokenizer: &pb.CountTokensRequest_Model{Model: model}, Text: "hello world"})
	if err != nil {
		t.Fatal(assembler.ErrorDetails(err))
	}
	if resp.GetTokens() != 2 || resp.GetTokenizer() != "o200k_base" || !resp.GetExact() {
		t.Errorf("%d tokens by %s (exact %t); want 2 by o200k_base, exact", resp.GetTokens(),
			resp.GetTokenizer(), resp.GetExact())
	}
}
