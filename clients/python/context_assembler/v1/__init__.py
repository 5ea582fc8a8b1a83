"""The context_assembler.v1 contract: messages (assembler_pb2) and the gRPC stub (assembler_pb2_grpc),
generated from proto/context_assembler/v1/assembler.proto by generate.sh. Do not edit them by hand."""
