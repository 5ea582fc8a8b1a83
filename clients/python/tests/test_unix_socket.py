"""A sidecar on a Unix socket, through connect's defaults: the calls arrive.

grpcio sends a "unix:" channel's socket path as its `:authority` unless told otherwise, and the
sidecar's HTTP/2 server resets every such call (RST_STREAM PROTOCOL_ERROR). connect sends
"localhost" instead; without it, the fixture's wait for SERVING already fails."""

from context_assembler.v1 import assembler_pb2 as pb

TIMEOUT_SECS = 10


def test_connect_reaches_a_sidecar_on_a_unix_socket(stub_unix):
    counted = stub_unix.CountTokens(pb.CountTokensRequest(model="gpt-4o", text="hello world"),
                                    timeout=TIMEOUT_SECS)
    assert (counted.tokens, counted.tokenizer, counted.exact) == (2, "o200k_base", True)
