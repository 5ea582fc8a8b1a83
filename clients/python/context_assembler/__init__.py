"""Client of the context-assembler sidecar.

The contract's generated code is in `context_assembler.v1` (`assembler_pb2`: the messages;
`assembler_pb2_grpc`: `AssemblerStub`). The helper (`context_assembler.client`, re-exported here)
connects with sensible defaults, waits for readiness and decodes the rich error details.
"""

from context_assembler.client import (
    DEFAULT_SERVICE_CONFIG,
    ERROR_DOMAIN,
    Connection,
    ErrorDetails,
    connect,
    error_details,
    wait_ready,
)

__all__ = [
    "DEFAULT_SERVICE_CONFIG",
    "ERROR_DOMAIN",
    "Connection",
    "ErrorDetails",
    "connect",
    "error_details",
    "wait_ready",
]
