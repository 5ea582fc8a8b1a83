package dev.contextassembler.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * Assembles prompts under a token budget. The assembling RPCs are
 * side-effect free apart from warming the sidecar's token-count caches;
 * Retain and Forget write the memory store, which recall reads.
 * Error details. Every error the sidecar answers carries its details in
 * `grpc-status-details-bin` (an encoded `google.rpc.Status`); a batch or
 * stream error carries the same bytes in `RequestError.status_details`:
 * - INVALID_ARGUMENT: `google.rpc.BadRequest`, one field violation per bad
 *   field (its path, such as `blocks[2].items[0].id`, and why), at most 16,
 *   the message saying how many more there were.
 * - FAILED_PRECONDITION: `google.rpc.ErrorInfo` with domain
 *   `context-assembler` and a reason:
 *   - `BUDGET_OVERFLOW` (metadata `non_cuttable_tokens`, `budget`, `model`),
 *     with a `BudgetOverflowDetail`: what each part that may never be cut
 *     needs, so a caller can decide what to drop;
 *   - `TEMPLATE_REFUSED` (metadata `model`): the model's chat template
 *     refuses the prompt laid out for it;
 *   - `MEMORY_DISABLED`: the sidecar runs without a memory store.
 * - RESOURCE_EXHAUSTED: `google.rpc.ErrorInfo` with metadata `limit` and
 *   `value`, of reason `REQUEST_TOO_LARGE` (bytes), `REQUEST_TOO_COMPLEX`
 *   (decoded bytes), `TOO_MANY_BLOCKS`, `TOO_MANY_ITEMS`,
 *   `TOO_MANY_REQUESTS` (a batch), or `OVERLOADED` (work slots or the upload
 *   budget; with a `google.rpc.RetryInfo` to wait before retrying).
 * - UNAVAILABLE: `google.rpc.ErrorInfo` of reason `SHUTTING_DOWN` (retry on
 *   another instance) or `MEMORY_UNAVAILABLE` (with a `google.rpc.RetryInfo`;
 *   retry the same call).
 * - PERMISSION_DENIED: `google.rpc.ErrorInfo` of reason `CLAIM_DENIED`
 *   (metadata `field`, `claim`, `identity`): a client certificate's identity
 *   may not make this claim.
 * - DEADLINE_EXCEEDED, CANCELLED, ABORTED (a request body that ended
 *   abnormally), INTERNAL: a message only.
 * buf:lint:ignore SERVICE_SUFFIX
 * The service is `Assembler`, not `AssemblerService`: the name is part of
 * every method's path (`/context_assembler.v1.Assembler/Assemble`), so
 * renaming it would break every deployed caller.
 * </pre>
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: context_assembler/v1/assembler.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class AssemblerGrpc {

  private AssemblerGrpc() {}

  public static final String SERVICE_NAME = "context_assembler.v1.Assembler";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<dev.contextassembler.v1.AssembleRequest,
      dev.contextassembler.v1.AssembleResponse> getAssembleMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Assemble",
      requestType = dev.contextassembler.v1.AssembleRequest.class,
      responseType = dev.contextassembler.v1.AssembleResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.contextassembler.v1.AssembleRequest,
      dev.contextassembler.v1.AssembleResponse> getAssembleMethod() {
    io.grpc.MethodDescriptor<dev.contextassembler.v1.AssembleRequest, dev.contextassembler.v1.AssembleResponse> getAssembleMethod;
    if ((getAssembleMethod = AssemblerGrpc.getAssembleMethod) == null) {
      synchronized (AssemblerGrpc.class) {
        if ((getAssembleMethod = AssemblerGrpc.getAssembleMethod) == null) {
          AssemblerGrpc.getAssembleMethod = getAssembleMethod =
              io.grpc.MethodDescriptor.<dev.contextassembler.v1.AssembleRequest, dev.contextassembler.v1.AssembleResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Assemble"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.AssembleRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.AssembleResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AssemblerMethodDescriptorSupplier("Assemble"))
              .build();
        }
      }
    }
    return getAssembleMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.contextassembler.v1.CountTokensRequest,
      dev.contextassembler.v1.CountTokensResponse> getCountTokensMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "CountTokens",
      requestType = dev.contextassembler.v1.CountTokensRequest.class,
      responseType = dev.contextassembler.v1.CountTokensResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.contextassembler.v1.CountTokensRequest,
      dev.contextassembler.v1.CountTokensResponse> getCountTokensMethod() {
    io.grpc.MethodDescriptor<dev.contextassembler.v1.CountTokensRequest, dev.contextassembler.v1.CountTokensResponse> getCountTokensMethod;
    if ((getCountTokensMethod = AssemblerGrpc.getCountTokensMethod) == null) {
      synchronized (AssemblerGrpc.class) {
        if ((getCountTokensMethod = AssemblerGrpc.getCountTokensMethod) == null) {
          AssemblerGrpc.getCountTokensMethod = getCountTokensMethod =
              io.grpc.MethodDescriptor.<dev.contextassembler.v1.CountTokensRequest, dev.contextassembler.v1.CountTokensResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "CountTokens"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.CountTokensRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.CountTokensResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AssemblerMethodDescriptorSupplier("CountTokens"))
              .build();
        }
      }
    }
    return getCountTokensMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.contextassembler.v1.ListModelsRequest,
      dev.contextassembler.v1.ListModelsResponse> getListModelsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListModels",
      requestType = dev.contextassembler.v1.ListModelsRequest.class,
      responseType = dev.contextassembler.v1.ListModelsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.contextassembler.v1.ListModelsRequest,
      dev.contextassembler.v1.ListModelsResponse> getListModelsMethod() {
    io.grpc.MethodDescriptor<dev.contextassembler.v1.ListModelsRequest, dev.contextassembler.v1.ListModelsResponse> getListModelsMethod;
    if ((getListModelsMethod = AssemblerGrpc.getListModelsMethod) == null) {
      synchronized (AssemblerGrpc.class) {
        if ((getListModelsMethod = AssemblerGrpc.getListModelsMethod) == null) {
          AssemblerGrpc.getListModelsMethod = getListModelsMethod =
              io.grpc.MethodDescriptor.<dev.contextassembler.v1.ListModelsRequest, dev.contextassembler.v1.ListModelsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListModels"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.ListModelsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.ListModelsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AssemblerMethodDescriptorSupplier("ListModels"))
              .build();
        }
      }
    }
    return getListModelsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.contextassembler.v1.AssembleBatchRequest,
      dev.contextassembler.v1.AssembleBatchResponse> getAssembleBatchMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "AssembleBatch",
      requestType = dev.contextassembler.v1.AssembleBatchRequest.class,
      responseType = dev.contextassembler.v1.AssembleBatchResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.contextassembler.v1.AssembleBatchRequest,
      dev.contextassembler.v1.AssembleBatchResponse> getAssembleBatchMethod() {
    io.grpc.MethodDescriptor<dev.contextassembler.v1.AssembleBatchRequest, dev.contextassembler.v1.AssembleBatchResponse> getAssembleBatchMethod;
    if ((getAssembleBatchMethod = AssemblerGrpc.getAssembleBatchMethod) == null) {
      synchronized (AssemblerGrpc.class) {
        if ((getAssembleBatchMethod = AssemblerGrpc.getAssembleBatchMethod) == null) {
          AssemblerGrpc.getAssembleBatchMethod = getAssembleBatchMethod =
              io.grpc.MethodDescriptor.<dev.contextassembler.v1.AssembleBatchRequest, dev.contextassembler.v1.AssembleBatchResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "AssembleBatch"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.AssembleBatchRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.AssembleBatchResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AssemblerMethodDescriptorSupplier("AssembleBatch"))
              .build();
        }
      }
    }
    return getAssembleBatchMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.contextassembler.v1.AssembleRequest,
      dev.contextassembler.v1.AssembleStreamResponse> getAssembleStreamMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "AssembleStream",
      requestType = dev.contextassembler.v1.AssembleRequest.class,
      responseType = dev.contextassembler.v1.AssembleStreamResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
  public static io.grpc.MethodDescriptor<dev.contextassembler.v1.AssembleRequest,
      dev.contextassembler.v1.AssembleStreamResponse> getAssembleStreamMethod() {
    io.grpc.MethodDescriptor<dev.contextassembler.v1.AssembleRequest, dev.contextassembler.v1.AssembleStreamResponse> getAssembleStreamMethod;
    if ((getAssembleStreamMethod = AssemblerGrpc.getAssembleStreamMethod) == null) {
      synchronized (AssemblerGrpc.class) {
        if ((getAssembleStreamMethod = AssemblerGrpc.getAssembleStreamMethod) == null) {
          AssemblerGrpc.getAssembleStreamMethod = getAssembleStreamMethod =
              io.grpc.MethodDescriptor.<dev.contextassembler.v1.AssembleRequest, dev.contextassembler.v1.AssembleStreamResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "AssembleStream"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.AssembleRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.AssembleStreamResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AssemblerMethodDescriptorSupplier("AssembleStream"))
              .build();
        }
      }
    }
    return getAssembleStreamMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.contextassembler.v1.ReportUsageRequest,
      dev.contextassembler.v1.ReportUsageResponse> getReportUsageMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ReportUsage",
      requestType = dev.contextassembler.v1.ReportUsageRequest.class,
      responseType = dev.contextassembler.v1.ReportUsageResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.contextassembler.v1.ReportUsageRequest,
      dev.contextassembler.v1.ReportUsageResponse> getReportUsageMethod() {
    io.grpc.MethodDescriptor<dev.contextassembler.v1.ReportUsageRequest, dev.contextassembler.v1.ReportUsageResponse> getReportUsageMethod;
    if ((getReportUsageMethod = AssemblerGrpc.getReportUsageMethod) == null) {
      synchronized (AssemblerGrpc.class) {
        if ((getReportUsageMethod = AssemblerGrpc.getReportUsageMethod) == null) {
          AssemblerGrpc.getReportUsageMethod = getReportUsageMethod =
              io.grpc.MethodDescriptor.<dev.contextassembler.v1.ReportUsageRequest, dev.contextassembler.v1.ReportUsageResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ReportUsage"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.ReportUsageRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.ReportUsageResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AssemblerMethodDescriptorSupplier("ReportUsage"))
              .build();
        }
      }
    }
    return getReportUsageMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.contextassembler.v1.CompactRequest,
      dev.contextassembler.v1.CompactResponse> getCompactMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Compact",
      requestType = dev.contextassembler.v1.CompactRequest.class,
      responseType = dev.contextassembler.v1.CompactResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.contextassembler.v1.CompactRequest,
      dev.contextassembler.v1.CompactResponse> getCompactMethod() {
    io.grpc.MethodDescriptor<dev.contextassembler.v1.CompactRequest, dev.contextassembler.v1.CompactResponse> getCompactMethod;
    if ((getCompactMethod = AssemblerGrpc.getCompactMethod) == null) {
      synchronized (AssemblerGrpc.class) {
        if ((getCompactMethod = AssemblerGrpc.getCompactMethod) == null) {
          AssemblerGrpc.getCompactMethod = getCompactMethod =
              io.grpc.MethodDescriptor.<dev.contextassembler.v1.CompactRequest, dev.contextassembler.v1.CompactResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Compact"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.CompactRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.CompactResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AssemblerMethodDescriptorSupplier("Compact"))
              .build();
        }
      }
    }
    return getCompactMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.contextassembler.v1.RetainRequest,
      dev.contextassembler.v1.RetainResponse> getRetainMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Retain",
      requestType = dev.contextassembler.v1.RetainRequest.class,
      responseType = dev.contextassembler.v1.RetainResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.contextassembler.v1.RetainRequest,
      dev.contextassembler.v1.RetainResponse> getRetainMethod() {
    io.grpc.MethodDescriptor<dev.contextassembler.v1.RetainRequest, dev.contextassembler.v1.RetainResponse> getRetainMethod;
    if ((getRetainMethod = AssemblerGrpc.getRetainMethod) == null) {
      synchronized (AssemblerGrpc.class) {
        if ((getRetainMethod = AssemblerGrpc.getRetainMethod) == null) {
          AssemblerGrpc.getRetainMethod = getRetainMethod =
              io.grpc.MethodDescriptor.<dev.contextassembler.v1.RetainRequest, dev.contextassembler.v1.RetainResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Retain"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.RetainRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.RetainResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AssemblerMethodDescriptorSupplier("Retain"))
              .build();
        }
      }
    }
    return getRetainMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.contextassembler.v1.ForgetRequest,
      dev.contextassembler.v1.ForgetResponse> getForgetMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Forget",
      requestType = dev.contextassembler.v1.ForgetRequest.class,
      responseType = dev.contextassembler.v1.ForgetResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.contextassembler.v1.ForgetRequest,
      dev.contextassembler.v1.ForgetResponse> getForgetMethod() {
    io.grpc.MethodDescriptor<dev.contextassembler.v1.ForgetRequest, dev.contextassembler.v1.ForgetResponse> getForgetMethod;
    if ((getForgetMethod = AssemblerGrpc.getForgetMethod) == null) {
      synchronized (AssemblerGrpc.class) {
        if ((getForgetMethod = AssemblerGrpc.getForgetMethod) == null) {
          AssemblerGrpc.getForgetMethod = getForgetMethod =
              io.grpc.MethodDescriptor.<dev.contextassembler.v1.ForgetRequest, dev.contextassembler.v1.ForgetResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Forget"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.ForgetRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.ForgetResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AssemblerMethodDescriptorSupplier("Forget"))
              .build();
        }
      }
    }
    return getForgetMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.contextassembler.v1.ListMemoriesRequest,
      dev.contextassembler.v1.ListMemoriesResponse> getListMemoriesMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListMemories",
      requestType = dev.contextassembler.v1.ListMemoriesRequest.class,
      responseType = dev.contextassembler.v1.ListMemoriesResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.contextassembler.v1.ListMemoriesRequest,
      dev.contextassembler.v1.ListMemoriesResponse> getListMemoriesMethod() {
    io.grpc.MethodDescriptor<dev.contextassembler.v1.ListMemoriesRequest, dev.contextassembler.v1.ListMemoriesResponse> getListMemoriesMethod;
    if ((getListMemoriesMethod = AssemblerGrpc.getListMemoriesMethod) == null) {
      synchronized (AssemblerGrpc.class) {
        if ((getListMemoriesMethod = AssemblerGrpc.getListMemoriesMethod) == null) {
          AssemblerGrpc.getListMemoriesMethod = getListMemoriesMethod =
              io.grpc.MethodDescriptor.<dev.contextassembler.v1.ListMemoriesRequest, dev.contextassembler.v1.ListMemoriesResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListMemories"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.ListMemoriesRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.contextassembler.v1.ListMemoriesResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AssemblerMethodDescriptorSupplier("ListMemories"))
              .build();
        }
      }
    }
    return getListMemoriesMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static AssemblerStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AssemblerStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AssemblerStub>() {
        @java.lang.Override
        public AssemblerStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AssemblerStub(channel, callOptions);
        }
      };
    return AssemblerStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static AssemblerBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AssemblerBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AssemblerBlockingStub>() {
        @java.lang.Override
        public AssemblerBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AssemblerBlockingStub(channel, callOptions);
        }
      };
    return AssemblerBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static AssemblerFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AssemblerFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AssemblerFutureStub>() {
        @java.lang.Override
        public AssemblerFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AssemblerFutureStub(channel, callOptions);
        }
      };
    return AssemblerFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * Assembles prompts under a token budget. The assembling RPCs are
   * side-effect free apart from warming the sidecar's token-count caches;
   * Retain and Forget write the memory store, which recall reads.
   * Error details. Every error the sidecar answers carries its details in
   * `grpc-status-details-bin` (an encoded `google.rpc.Status`); a batch or
   * stream error carries the same bytes in `RequestError.status_details`:
   * - INVALID_ARGUMENT: `google.rpc.BadRequest`, one field violation per bad
   *   field (its path, such as `blocks[2].items[0].id`, and why), at most 16,
   *   the message saying how many more there were.
   * - FAILED_PRECONDITION: `google.rpc.ErrorInfo` with domain
   *   `context-assembler` and a reason:
   *   - `BUDGET_OVERFLOW` (metadata `non_cuttable_tokens`, `budget`, `model`),
   *     with a `BudgetOverflowDetail`: what each part that may never be cut
   *     needs, so a caller can decide what to drop;
   *   - `TEMPLATE_REFUSED` (metadata `model`): the model's chat template
   *     refuses the prompt laid out for it;
   *   - `MEMORY_DISABLED`: the sidecar runs without a memory store.
   * - RESOURCE_EXHAUSTED: `google.rpc.ErrorInfo` with metadata `limit` and
   *   `value`, of reason `REQUEST_TOO_LARGE` (bytes), `REQUEST_TOO_COMPLEX`
   *   (decoded bytes), `TOO_MANY_BLOCKS`, `TOO_MANY_ITEMS`,
   *   `TOO_MANY_REQUESTS` (a batch), or `OVERLOADED` (work slots or the upload
   *   budget; with a `google.rpc.RetryInfo` to wait before retrying).
   * - UNAVAILABLE: `google.rpc.ErrorInfo` of reason `SHUTTING_DOWN` (retry on
   *   another instance) or `MEMORY_UNAVAILABLE` (with a `google.rpc.RetryInfo`;
   *   retry the same call).
   * - PERMISSION_DENIED: `google.rpc.ErrorInfo` of reason `CLAIM_DENIED`
   *   (metadata `field`, `claim`, `identity`): a client certificate's identity
   *   may not make this claim.
   * - DEADLINE_EXCEEDED, CANCELLED, ABORTED (a request body that ended
   *   abnormally), INTERNAL: a message only.
   * buf:lint:ignore SERVICE_SUFFIX
   * The service is `Assembler`, not `AssemblerService`: the name is part of
   * every method's path (`/context_assembler.v1.Assembler/Assemble`), so
   * renaming it would break every deployed caller.
   * </pre>
   */
  public static abstract class AssemblerImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Assembles one prompt. Errors: INVALID_ARGUMENT with a
     * `google.rpc.BadRequest` detail naming each bad field (unknown model,
     * empty query, duplicate block names, min_tokens &gt; max_tokens, ...);
     * FAILED_PRECONDITION with a `google.rpc.ErrorInfo` detail of reason
     * `BUDGET_OVERFLOW` and a `BudgetOverflowDetail` when the content that may
     * never be cut does not fit.
     * buf:lint:ignore RPC_REQUEST_RESPONSE_UNIQUE
     * AssembleStream sends the same AssembleRequest (see there).
     * </pre>
     */
    public void assemble(dev.contextassembler.v1.AssembleRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.AssembleResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getAssembleMethod(), responseObserver);
    }

    /**
     * <pre>
     * Counts the tokens of one text with a model's or an encoding's tokenizer
     * (no chat-formula overhead).
     * </pre>
     */
    public void countTokens(dev.contextassembler.v1.CountTokensRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.CountTokensResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCountTokensMethod(), responseObserver);
    }

    /**
     * <pre>
     * Lists the models the sidecar knows, with their tokenizers and budgets.
     * </pre>
     */
    public void listModels(dev.contextassembler.v1.ListModelsRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.ListModelsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListModelsMethod(), responseObserver);
    }

    /**
     * <pre>
     * Assembles many prompts at once: one result per request, in order (a bad
     * request fails alone, as a RequestError), the requests grouped by what a
     * prompt cache can share, and an order to dispatch them in. Each distinct
     * static prefix is hashed and counted once per batch. The batch as a whole
     * is one request for the limits (size, deadline, one work slot, at most
     * limits.max_batch_requests requests: RESOURCE_EXHAUSTED TOO_MANY_REQUESTS);
     * each request in it is checked against the block and item limits.
     * </pre>
     */
    public void assembleBatch(dev.contextassembler.v1.AssembleBatchRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.AssembleBatchResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getAssembleBatchMethod(), responseObserver);
    }

    /**
     * <pre>
     * One long-lived stream: each AssembleRequest sent gets one
     * AssembleStreamResponse, in order, carrying the response or the error of
     * that request; the stream itself stays open. Each message is admitted
     * like a unary call (shape, a work slot, the default deadline, or an error
     * for that message alone). A message over the size limit, the upload
     * budget or the decoded-size limit ends the stream with
     * RESOURCE_EXHAUSTED before it is decoded. When the sidecar drains, the
     * stream answers the messages it admitted, then ends with UNAVAILABLE
     * (ErrorInfo reason SHUTTING_DOWN).
     * buf:lint:ignore RPC_REQUEST_STANDARD_NAME
     * buf:lint:ignore RPC_REQUEST_RESPONSE_UNIQUE
     * Each message of the stream is an AssembleRequest on purpose: a caller
     * moves a request between the unary call and the stream unchanged.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<dev.contextassembler.v1.AssembleRequest> assembleStream(
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.AssembleStreamResponse> responseObserver) {
      return io.grpc.stub.ServerCalls.asyncUnimplementedStreamingCall(getAssembleStreamMethod(), responseObserver);
    }

    /**
     * <pre>
     * The provider feedback loop: after the provider answered, report what it
     * counted and cached for a request. The sidecar keeps each assembled
     * request's count for 15 minutes (by request_id) and exports the relative
     * error between its count and the provider's, and the provider's prompt and
     * cached tokens. INVALID_ARGUMENT when provider is empty. An estimating
     * model's margin adapts from these reports, at most once a minute and by
     * at most 15 points a change: however many reports a caller sends, the
     * margin moves at most 15 points a minute.
     * </pre>
     */
    public void reportUsage(dev.contextassembler.v1.ReportUsageRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.ReportUsageResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getReportUsageMethod(), responseObserver);
    }

    /**
     * <pre>
     * Compacts one conversation without a model call. At or past
     * `trigger_tokens` the older messages become one continuation message
     * carrying a deterministic summary (merged into an earlier one, never
     * nested), followed by the pinned items and the `preserve_recent` latest
     * messages verbatim. A cut never separates a tool call from its result, and
     * the output never begins with a tool result. A session whose compactions
     * end over `target_tokens` three times in a row is trimmed instead (its
     * circuit breaker opens); `context_length_exceeded` trims the oldest turns
     * two at a time until under the target. Token counts use the compaction
     * formula (see CompactResponse). Errors: INVALID_ARGUMENT with a
     * `google.rpc.BadRequest` detail naming each bad field.
     * </pre>
     */
    public void compact(dev.contextassembler.v1.CompactRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.CompactResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCompactMethod(), responseObserver);
    }

    /**
     * <pre>
     * Stores durable memories after an answer: structured observations and
     * summaries, and those found in raw model output (`&lt;observation&gt;` and
     * `&lt;summary&gt;` blocks, read leniently: code and markup in a field are kept
     * as text; a block that cannot be a memory, such as an observation without
     * a known type or text, is reported in `problems` and skipped, never
     * failing the call). Text inside
     * `&lt;private&gt;...&lt;/private&gt;` is removed before anything is parsed or stored.
     * Idempotent by `idempotency_key`: a retried call stores nothing and
     * answers the first call's ids. Durable once OK. Retention limits of the
     * subject apply in the same write, and the store's size bound
     * (`memory.max_total_bytes`, oldest memories of any subject first).
     * Errors: INVALID_ARGUMENT naming each bad field (a memory over
     * `memory.max_memory_bytes` names its largest field; a model_output block
     * over it is a problem instead); FAILED_PRECONDITION (reason
     * MEMORY_DISABLED) when the sidecar runs without a memory store;
     * UNAVAILABLE (reason MEMORY_UNAVAILABLE, with RetryInfo) when the store
     * cannot be reached, is full, read-only or busy (retry with the same key).
     * </pre>
     */
    public void retain(dev.contextassembler.v1.RetainRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.RetainResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getRetainMethod(), responseObserver);
    }

    /**
     * <pre>
     * Deletes memories of one subject: by ids, all of them (and the
     * subject's idempotency keys), or those of one type. Always names the
     * subject: an id of another subject is never touched. Errors:
     * INVALID_ARGUMENT naming `subject` when it is empty, and each bad field.
     * </pre>
     */
    public void forget(dev.contextassembler.v1.ForgetRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.ForgetResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getForgetMethod(), responseObserver);
    }

    /**
     * <pre>
     * Lists a subject's memories that the principal may see (it holds every
     * required scope), newest first, a page at a time (a page ends early at
     * `memory.max_page_bytes`). Errors: INVALID_ARGUMENT naming each bad
     * field (`principal.scopes` past 4096 scopes).
     * </pre>
     */
    public void listMemories(dev.contextassembler.v1.ListMemoriesRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.ListMemoriesResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListMemoriesMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getAssembleMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.contextassembler.v1.AssembleRequest,
                dev.contextassembler.v1.AssembleResponse>(
                  this, METHODID_ASSEMBLE)))
          .addMethod(
            getCountTokensMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.contextassembler.v1.CountTokensRequest,
                dev.contextassembler.v1.CountTokensResponse>(
                  this, METHODID_COUNT_TOKENS)))
          .addMethod(
            getListModelsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.contextassembler.v1.ListModelsRequest,
                dev.contextassembler.v1.ListModelsResponse>(
                  this, METHODID_LIST_MODELS)))
          .addMethod(
            getAssembleBatchMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.contextassembler.v1.AssembleBatchRequest,
                dev.contextassembler.v1.AssembleBatchResponse>(
                  this, METHODID_ASSEMBLE_BATCH)))
          .addMethod(
            getAssembleStreamMethod(),
            io.grpc.stub.ServerCalls.asyncBidiStreamingCall(
              new MethodHandlers<
                dev.contextassembler.v1.AssembleRequest,
                dev.contextassembler.v1.AssembleStreamResponse>(
                  this, METHODID_ASSEMBLE_STREAM)))
          .addMethod(
            getReportUsageMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.contextassembler.v1.ReportUsageRequest,
                dev.contextassembler.v1.ReportUsageResponse>(
                  this, METHODID_REPORT_USAGE)))
          .addMethod(
            getCompactMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.contextassembler.v1.CompactRequest,
                dev.contextassembler.v1.CompactResponse>(
                  this, METHODID_COMPACT)))
          .addMethod(
            getRetainMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.contextassembler.v1.RetainRequest,
                dev.contextassembler.v1.RetainResponse>(
                  this, METHODID_RETAIN)))
          .addMethod(
            getForgetMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.contextassembler.v1.ForgetRequest,
                dev.contextassembler.v1.ForgetResponse>(
                  this, METHODID_FORGET)))
          .addMethod(
            getListMemoriesMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.contextassembler.v1.ListMemoriesRequest,
                dev.contextassembler.v1.ListMemoriesResponse>(
                  this, METHODID_LIST_MEMORIES)))
          .build();
    }
  }

  /**
   * <pre>
   * Assembles prompts under a token budget. The assembling RPCs are
   * side-effect free apart from warming the sidecar's token-count caches;
   * Retain and Forget write the memory store, which recall reads.
   * Error details. Every error the sidecar answers carries its details in
   * `grpc-status-details-bin` (an encoded `google.rpc.Status`); a batch or
   * stream error carries the same bytes in `RequestError.status_details`:
   * - INVALID_ARGUMENT: `google.rpc.BadRequest`, one field violation per bad
   *   field (its path, such as `blocks[2].items[0].id`, and why), at most 16,
   *   the message saying how many more there were.
   * - FAILED_PRECONDITION: `google.rpc.ErrorInfo` with domain
   *   `context-assembler` and a reason:
   *   - `BUDGET_OVERFLOW` (metadata `non_cuttable_tokens`, `budget`, `model`),
   *     with a `BudgetOverflowDetail`: what each part that may never be cut
   *     needs, so a caller can decide what to drop;
   *   - `TEMPLATE_REFUSED` (metadata `model`): the model's chat template
   *     refuses the prompt laid out for it;
   *   - `MEMORY_DISABLED`: the sidecar runs without a memory store.
   * - RESOURCE_EXHAUSTED: `google.rpc.ErrorInfo` with metadata `limit` and
   *   `value`, of reason `REQUEST_TOO_LARGE` (bytes), `REQUEST_TOO_COMPLEX`
   *   (decoded bytes), `TOO_MANY_BLOCKS`, `TOO_MANY_ITEMS`,
   *   `TOO_MANY_REQUESTS` (a batch), or `OVERLOADED` (work slots or the upload
   *   budget; with a `google.rpc.RetryInfo` to wait before retrying).
   * - UNAVAILABLE: `google.rpc.ErrorInfo` of reason `SHUTTING_DOWN` (retry on
   *   another instance) or `MEMORY_UNAVAILABLE` (with a `google.rpc.RetryInfo`;
   *   retry the same call).
   * - PERMISSION_DENIED: `google.rpc.ErrorInfo` of reason `CLAIM_DENIED`
   *   (metadata `field`, `claim`, `identity`): a client certificate's identity
   *   may not make this claim.
   * - DEADLINE_EXCEEDED, CANCELLED, ABORTED (a request body that ended
   *   abnormally), INTERNAL: a message only.
   * buf:lint:ignore SERVICE_SUFFIX
   * The service is `Assembler`, not `AssemblerService`: the name is part of
   * every method's path (`/context_assembler.v1.Assembler/Assemble`), so
   * renaming it would break every deployed caller.
   * </pre>
   */
  public static final class AssemblerStub extends io.grpc.stub.AbstractAsyncStub<AssemblerStub> {
    private AssemblerStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AssemblerStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AssemblerStub(channel, callOptions);
    }

    /**
     * <pre>
     * Assembles one prompt. Errors: INVALID_ARGUMENT with a
     * `google.rpc.BadRequest` detail naming each bad field (unknown model,
     * empty query, duplicate block names, min_tokens &gt; max_tokens, ...);
     * FAILED_PRECONDITION with a `google.rpc.ErrorInfo` detail of reason
     * `BUDGET_OVERFLOW` and a `BudgetOverflowDetail` when the content that may
     * never be cut does not fit.
     * buf:lint:ignore RPC_REQUEST_RESPONSE_UNIQUE
     * AssembleStream sends the same AssembleRequest (see there).
     * </pre>
     */
    public void assemble(dev.contextassembler.v1.AssembleRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.AssembleResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getAssembleMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Counts the tokens of one text with a model's or an encoding's tokenizer
     * (no chat-formula overhead).
     * </pre>
     */
    public void countTokens(dev.contextassembler.v1.CountTokensRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.CountTokensResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCountTokensMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Lists the models the sidecar knows, with their tokenizers and budgets.
     * </pre>
     */
    public void listModels(dev.contextassembler.v1.ListModelsRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.ListModelsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListModelsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Assembles many prompts at once: one result per request, in order (a bad
     * request fails alone, as a RequestError), the requests grouped by what a
     * prompt cache can share, and an order to dispatch them in. Each distinct
     * static prefix is hashed and counted once per batch. The batch as a whole
     * is one request for the limits (size, deadline, one work slot, at most
     * limits.max_batch_requests requests: RESOURCE_EXHAUSTED TOO_MANY_REQUESTS);
     * each request in it is checked against the block and item limits.
     * </pre>
     */
    public void assembleBatch(dev.contextassembler.v1.AssembleBatchRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.AssembleBatchResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getAssembleBatchMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * One long-lived stream: each AssembleRequest sent gets one
     * AssembleStreamResponse, in order, carrying the response or the error of
     * that request; the stream itself stays open. Each message is admitted
     * like a unary call (shape, a work slot, the default deadline, or an error
     * for that message alone). A message over the size limit, the upload
     * budget or the decoded-size limit ends the stream with
     * RESOURCE_EXHAUSTED before it is decoded. When the sidecar drains, the
     * stream answers the messages it admitted, then ends with UNAVAILABLE
     * (ErrorInfo reason SHUTTING_DOWN).
     * buf:lint:ignore RPC_REQUEST_STANDARD_NAME
     * buf:lint:ignore RPC_REQUEST_RESPONSE_UNIQUE
     * Each message of the stream is an AssembleRequest on purpose: a caller
     * moves a request between the unary call and the stream unchanged.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<dev.contextassembler.v1.AssembleRequest> assembleStream(
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.AssembleStreamResponse> responseObserver) {
      return io.grpc.stub.ClientCalls.asyncBidiStreamingCall(
          getChannel().newCall(getAssembleStreamMethod(), getCallOptions()), responseObserver);
    }

    /**
     * <pre>
     * The provider feedback loop: after the provider answered, report what it
     * counted and cached for a request. The sidecar keeps each assembled
     * request's count for 15 minutes (by request_id) and exports the relative
     * error between its count and the provider's, and the provider's prompt and
     * cached tokens. INVALID_ARGUMENT when provider is empty. An estimating
     * model's margin adapts from these reports, at most once a minute and by
     * at most 15 points a change: however many reports a caller sends, the
     * margin moves at most 15 points a minute.
     * </pre>
     */
    public void reportUsage(dev.contextassembler.v1.ReportUsageRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.ReportUsageResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getReportUsageMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Compacts one conversation without a model call. At or past
     * `trigger_tokens` the older messages become one continuation message
     * carrying a deterministic summary (merged into an earlier one, never
     * nested), followed by the pinned items and the `preserve_recent` latest
     * messages verbatim. A cut never separates a tool call from its result, and
     * the output never begins with a tool result. A session whose compactions
     * end over `target_tokens` three times in a row is trimmed instead (its
     * circuit breaker opens); `context_length_exceeded` trims the oldest turns
     * two at a time until under the target. Token counts use the compaction
     * formula (see CompactResponse). Errors: INVALID_ARGUMENT with a
     * `google.rpc.BadRequest` detail naming each bad field.
     * </pre>
     */
    public void compact(dev.contextassembler.v1.CompactRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.CompactResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCompactMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Stores durable memories after an answer: structured observations and
     * summaries, and those found in raw model output (`&lt;observation&gt;` and
     * `&lt;summary&gt;` blocks, read leniently: code and markup in a field are kept
     * as text; a block that cannot be a memory, such as an observation without
     * a known type or text, is reported in `problems` and skipped, never
     * failing the call). Text inside
     * `&lt;private&gt;...&lt;/private&gt;` is removed before anything is parsed or stored.
     * Idempotent by `idempotency_key`: a retried call stores nothing and
     * answers the first call's ids. Durable once OK. Retention limits of the
     * subject apply in the same write, and the store's size bound
     * (`memory.max_total_bytes`, oldest memories of any subject first).
     * Errors: INVALID_ARGUMENT naming each bad field (a memory over
     * `memory.max_memory_bytes` names its largest field; a model_output block
     * over it is a problem instead); FAILED_PRECONDITION (reason
     * MEMORY_DISABLED) when the sidecar runs without a memory store;
     * UNAVAILABLE (reason MEMORY_UNAVAILABLE, with RetryInfo) when the store
     * cannot be reached, is full, read-only or busy (retry with the same key).
     * </pre>
     */
    public void retain(dev.contextassembler.v1.RetainRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.RetainResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getRetainMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Deletes memories of one subject: by ids, all of them (and the
     * subject's idempotency keys), or those of one type. Always names the
     * subject: an id of another subject is never touched. Errors:
     * INVALID_ARGUMENT naming `subject` when it is empty, and each bad field.
     * </pre>
     */
    public void forget(dev.contextassembler.v1.ForgetRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.ForgetResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getForgetMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Lists a subject's memories that the principal may see (it holds every
     * required scope), newest first, a page at a time (a page ends early at
     * `memory.max_page_bytes`). Errors: INVALID_ARGUMENT naming each bad
     * field (`principal.scopes` past 4096 scopes).
     * </pre>
     */
    public void listMemories(dev.contextassembler.v1.ListMemoriesRequest request,
        io.grpc.stub.StreamObserver<dev.contextassembler.v1.ListMemoriesResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListMemoriesMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * <pre>
   * Assembles prompts under a token budget. The assembling RPCs are
   * side-effect free apart from warming the sidecar's token-count caches;
   * Retain and Forget write the memory store, which recall reads.
   * Error details. Every error the sidecar answers carries its details in
   * `grpc-status-details-bin` (an encoded `google.rpc.Status`); a batch or
   * stream error carries the same bytes in `RequestError.status_details`:
   * - INVALID_ARGUMENT: `google.rpc.BadRequest`, one field violation per bad
   *   field (its path, such as `blocks[2].items[0].id`, and why), at most 16,
   *   the message saying how many more there were.
   * - FAILED_PRECONDITION: `google.rpc.ErrorInfo` with domain
   *   `context-assembler` and a reason:
   *   - `BUDGET_OVERFLOW` (metadata `non_cuttable_tokens`, `budget`, `model`),
   *     with a `BudgetOverflowDetail`: what each part that may never be cut
   *     needs, so a caller can decide what to drop;
   *   - `TEMPLATE_REFUSED` (metadata `model`): the model's chat template
   *     refuses the prompt laid out for it;
   *   - `MEMORY_DISABLED`: the sidecar runs without a memory store.
   * - RESOURCE_EXHAUSTED: `google.rpc.ErrorInfo` with metadata `limit` and
   *   `value`, of reason `REQUEST_TOO_LARGE` (bytes), `REQUEST_TOO_COMPLEX`
   *   (decoded bytes), `TOO_MANY_BLOCKS`, `TOO_MANY_ITEMS`,
   *   `TOO_MANY_REQUESTS` (a batch), or `OVERLOADED` (work slots or the upload
   *   budget; with a `google.rpc.RetryInfo` to wait before retrying).
   * - UNAVAILABLE: `google.rpc.ErrorInfo` of reason `SHUTTING_DOWN` (retry on
   *   another instance) or `MEMORY_UNAVAILABLE` (with a `google.rpc.RetryInfo`;
   *   retry the same call).
   * - PERMISSION_DENIED: `google.rpc.ErrorInfo` of reason `CLAIM_DENIED`
   *   (metadata `field`, `claim`, `identity`): a client certificate's identity
   *   may not make this claim.
   * - DEADLINE_EXCEEDED, CANCELLED, ABORTED (a request body that ended
   *   abnormally), INTERNAL: a message only.
   * buf:lint:ignore SERVICE_SUFFIX
   * The service is `Assembler`, not `AssemblerService`: the name is part of
   * every method's path (`/context_assembler.v1.Assembler/Assemble`), so
   * renaming it would break every deployed caller.
   * </pre>
   */
  public static final class AssemblerBlockingStub extends io.grpc.stub.AbstractBlockingStub<AssemblerBlockingStub> {
    private AssemblerBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AssemblerBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AssemblerBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Assembles one prompt. Errors: INVALID_ARGUMENT with a
     * `google.rpc.BadRequest` detail naming each bad field (unknown model,
     * empty query, duplicate block names, min_tokens &gt; max_tokens, ...);
     * FAILED_PRECONDITION with a `google.rpc.ErrorInfo` detail of reason
     * `BUDGET_OVERFLOW` and a `BudgetOverflowDetail` when the content that may
     * never be cut does not fit.
     * buf:lint:ignore RPC_REQUEST_RESPONSE_UNIQUE
     * AssembleStream sends the same AssembleRequest (see there).
     * </pre>
     */
    public dev.contextassembler.v1.AssembleResponse assemble(dev.contextassembler.v1.AssembleRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getAssembleMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Counts the tokens of one text with a model's or an encoding's tokenizer
     * (no chat-formula overhead).
     * </pre>
     */
    public dev.contextassembler.v1.CountTokensResponse countTokens(dev.contextassembler.v1.CountTokensRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCountTokensMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Lists the models the sidecar knows, with their tokenizers and budgets.
     * </pre>
     */
    public dev.contextassembler.v1.ListModelsResponse listModels(dev.contextassembler.v1.ListModelsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListModelsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Assembles many prompts at once: one result per request, in order (a bad
     * request fails alone, as a RequestError), the requests grouped by what a
     * prompt cache can share, and an order to dispatch them in. Each distinct
     * static prefix is hashed and counted once per batch. The batch as a whole
     * is one request for the limits (size, deadline, one work slot, at most
     * limits.max_batch_requests requests: RESOURCE_EXHAUSTED TOO_MANY_REQUESTS);
     * each request in it is checked against the block and item limits.
     * </pre>
     */
    public dev.contextassembler.v1.AssembleBatchResponse assembleBatch(dev.contextassembler.v1.AssembleBatchRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getAssembleBatchMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * The provider feedback loop: after the provider answered, report what it
     * counted and cached for a request. The sidecar keeps each assembled
     * request's count for 15 minutes (by request_id) and exports the relative
     * error between its count and the provider's, and the provider's prompt and
     * cached tokens. INVALID_ARGUMENT when provider is empty. An estimating
     * model's margin adapts from these reports, at most once a minute and by
     * at most 15 points a change: however many reports a caller sends, the
     * margin moves at most 15 points a minute.
     * </pre>
     */
    public dev.contextassembler.v1.ReportUsageResponse reportUsage(dev.contextassembler.v1.ReportUsageRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getReportUsageMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Compacts one conversation without a model call. At or past
     * `trigger_tokens` the older messages become one continuation message
     * carrying a deterministic summary (merged into an earlier one, never
     * nested), followed by the pinned items and the `preserve_recent` latest
     * messages verbatim. A cut never separates a tool call from its result, and
     * the output never begins with a tool result. A session whose compactions
     * end over `target_tokens` three times in a row is trimmed instead (its
     * circuit breaker opens); `context_length_exceeded` trims the oldest turns
     * two at a time until under the target. Token counts use the compaction
     * formula (see CompactResponse). Errors: INVALID_ARGUMENT with a
     * `google.rpc.BadRequest` detail naming each bad field.
     * </pre>
     */
    public dev.contextassembler.v1.CompactResponse compact(dev.contextassembler.v1.CompactRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCompactMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Stores durable memories after an answer: structured observations and
     * summaries, and those found in raw model output (`&lt;observation&gt;` and
     * `&lt;summary&gt;` blocks, read leniently: code and markup in a field are kept
     * as text; a block that cannot be a memory, such as an observation without
     * a known type or text, is reported in `problems` and skipped, never
     * failing the call). Text inside
     * `&lt;private&gt;...&lt;/private&gt;` is removed before anything is parsed or stored.
     * Idempotent by `idempotency_key`: a retried call stores nothing and
     * answers the first call's ids. Durable once OK. Retention limits of the
     * subject apply in the same write, and the store's size bound
     * (`memory.max_total_bytes`, oldest memories of any subject first).
     * Errors: INVALID_ARGUMENT naming each bad field (a memory over
     * `memory.max_memory_bytes` names its largest field; a model_output block
     * over it is a problem instead); FAILED_PRECONDITION (reason
     * MEMORY_DISABLED) when the sidecar runs without a memory store;
     * UNAVAILABLE (reason MEMORY_UNAVAILABLE, with RetryInfo) when the store
     * cannot be reached, is full, read-only or busy (retry with the same key).
     * </pre>
     */
    public dev.contextassembler.v1.RetainResponse retain(dev.contextassembler.v1.RetainRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getRetainMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Deletes memories of one subject: by ids, all of them (and the
     * subject's idempotency keys), or those of one type. Always names the
     * subject: an id of another subject is never touched. Errors:
     * INVALID_ARGUMENT naming `subject` when it is empty, and each bad field.
     * </pre>
     */
    public dev.contextassembler.v1.ForgetResponse forget(dev.contextassembler.v1.ForgetRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getForgetMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Lists a subject's memories that the principal may see (it holds every
     * required scope), newest first, a page at a time (a page ends early at
     * `memory.max_page_bytes`). Errors: INVALID_ARGUMENT naming each bad
     * field (`principal.scopes` past 4096 scopes).
     * </pre>
     */
    public dev.contextassembler.v1.ListMemoriesResponse listMemories(dev.contextassembler.v1.ListMemoriesRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListMemoriesMethod(), getCallOptions(), request);
    }
  }

  /**
   * <pre>
   * Assembles prompts under a token budget. The assembling RPCs are
   * side-effect free apart from warming the sidecar's token-count caches;
   * Retain and Forget write the memory store, which recall reads.
   * Error details. Every error the sidecar answers carries its details in
   * `grpc-status-details-bin` (an encoded `google.rpc.Status`); a batch or
   * stream error carries the same bytes in `RequestError.status_details`:
   * - INVALID_ARGUMENT: `google.rpc.BadRequest`, one field violation per bad
   *   field (its path, such as `blocks[2].items[0].id`, and why), at most 16,
   *   the message saying how many more there were.
   * - FAILED_PRECONDITION: `google.rpc.ErrorInfo` with domain
   *   `context-assembler` and a reason:
   *   - `BUDGET_OVERFLOW` (metadata `non_cuttable_tokens`, `budget`, `model`),
   *     with a `BudgetOverflowDetail`: what each part that may never be cut
   *     needs, so a caller can decide what to drop;
   *   - `TEMPLATE_REFUSED` (metadata `model`): the model's chat template
   *     refuses the prompt laid out for it;
   *   - `MEMORY_DISABLED`: the sidecar runs without a memory store.
   * - RESOURCE_EXHAUSTED: `google.rpc.ErrorInfo` with metadata `limit` and
   *   `value`, of reason `REQUEST_TOO_LARGE` (bytes), `REQUEST_TOO_COMPLEX`
   *   (decoded bytes), `TOO_MANY_BLOCKS`, `TOO_MANY_ITEMS`,
   *   `TOO_MANY_REQUESTS` (a batch), or `OVERLOADED` (work slots or the upload
   *   budget; with a `google.rpc.RetryInfo` to wait before retrying).
   * - UNAVAILABLE: `google.rpc.ErrorInfo` of reason `SHUTTING_DOWN` (retry on
   *   another instance) or `MEMORY_UNAVAILABLE` (with a `google.rpc.RetryInfo`;
   *   retry the same call).
   * - PERMISSION_DENIED: `google.rpc.ErrorInfo` of reason `CLAIM_DENIED`
   *   (metadata `field`, `claim`, `identity`): a client certificate's identity
   *   may not make this claim.
   * - DEADLINE_EXCEEDED, CANCELLED, ABORTED (a request body that ended
   *   abnormally), INTERNAL: a message only.
   * buf:lint:ignore SERVICE_SUFFIX
   * The service is `Assembler`, not `AssemblerService`: the name is part of
   * every method's path (`/context_assembler.v1.Assembler/Assemble`), so
   * renaming it would break every deployed caller.
   * </pre>
   */
  public static final class AssemblerFutureStub extends io.grpc.stub.AbstractFutureStub<AssemblerFutureStub> {
    private AssemblerFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AssemblerFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AssemblerFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Assembles one prompt. Errors: INVALID_ARGUMENT with a
     * `google.rpc.BadRequest` detail naming each bad field (unknown model,
     * empty query, duplicate block names, min_tokens &gt; max_tokens, ...);
     * FAILED_PRECONDITION with a `google.rpc.ErrorInfo` detail of reason
     * `BUDGET_OVERFLOW` and a `BudgetOverflowDetail` when the content that may
     * never be cut does not fit.
     * buf:lint:ignore RPC_REQUEST_RESPONSE_UNIQUE
     * AssembleStream sends the same AssembleRequest (see there).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.contextassembler.v1.AssembleResponse> assemble(
        dev.contextassembler.v1.AssembleRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getAssembleMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Counts the tokens of one text with a model's or an encoding's tokenizer
     * (no chat-formula overhead).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.contextassembler.v1.CountTokensResponse> countTokens(
        dev.contextassembler.v1.CountTokensRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCountTokensMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Lists the models the sidecar knows, with their tokenizers and budgets.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.contextassembler.v1.ListModelsResponse> listModels(
        dev.contextassembler.v1.ListModelsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListModelsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Assembles many prompts at once: one result per request, in order (a bad
     * request fails alone, as a RequestError), the requests grouped by what a
     * prompt cache can share, and an order to dispatch them in. Each distinct
     * static prefix is hashed and counted once per batch. The batch as a whole
     * is one request for the limits (size, deadline, one work slot, at most
     * limits.max_batch_requests requests: RESOURCE_EXHAUSTED TOO_MANY_REQUESTS);
     * each request in it is checked against the block and item limits.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.contextassembler.v1.AssembleBatchResponse> assembleBatch(
        dev.contextassembler.v1.AssembleBatchRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getAssembleBatchMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * The provider feedback loop: after the provider answered, report what it
     * counted and cached for a request. The sidecar keeps each assembled
     * request's count for 15 minutes (by request_id) and exports the relative
     * error between its count and the provider's, and the provider's prompt and
     * cached tokens. INVALID_ARGUMENT when provider is empty. An estimating
     * model's margin adapts from these reports, at most once a minute and by
     * at most 15 points a change: however many reports a caller sends, the
     * margin moves at most 15 points a minute.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.contextassembler.v1.ReportUsageResponse> reportUsage(
        dev.contextassembler.v1.ReportUsageRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getReportUsageMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Compacts one conversation without a model call. At or past
     * `trigger_tokens` the older messages become one continuation message
     * carrying a deterministic summary (merged into an earlier one, never
     * nested), followed by the pinned items and the `preserve_recent` latest
     * messages verbatim. A cut never separates a tool call from its result, and
     * the output never begins with a tool result. A session whose compactions
     * end over `target_tokens` three times in a row is trimmed instead (its
     * circuit breaker opens); `context_length_exceeded` trims the oldest turns
     * two at a time until under the target. Token counts use the compaction
     * formula (see CompactResponse). Errors: INVALID_ARGUMENT with a
     * `google.rpc.BadRequest` detail naming each bad field.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.contextassembler.v1.CompactResponse> compact(
        dev.contextassembler.v1.CompactRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCompactMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Stores durable memories after an answer: structured observations and
     * summaries, and those found in raw model output (`&lt;observation&gt;` and
     * `&lt;summary&gt;` blocks, read leniently: code and markup in a field are kept
     * as text; a block that cannot be a memory, such as an observation without
     * a known type or text, is reported in `problems` and skipped, never
     * failing the call). Text inside
     * `&lt;private&gt;...&lt;/private&gt;` is removed before anything is parsed or stored.
     * Idempotent by `idempotency_key`: a retried call stores nothing and
     * answers the first call's ids. Durable once OK. Retention limits of the
     * subject apply in the same write, and the store's size bound
     * (`memory.max_total_bytes`, oldest memories of any subject first).
     * Errors: INVALID_ARGUMENT naming each bad field (a memory over
     * `memory.max_memory_bytes` names its largest field; a model_output block
     * over it is a problem instead); FAILED_PRECONDITION (reason
     * MEMORY_DISABLED) when the sidecar runs without a memory store;
     * UNAVAILABLE (reason MEMORY_UNAVAILABLE, with RetryInfo) when the store
     * cannot be reached, is full, read-only or busy (retry with the same key).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.contextassembler.v1.RetainResponse> retain(
        dev.contextassembler.v1.RetainRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getRetainMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Deletes memories of one subject: by ids, all of them (and the
     * subject's idempotency keys), or those of one type. Always names the
     * subject: an id of another subject is never touched. Errors:
     * INVALID_ARGUMENT naming `subject` when it is empty, and each bad field.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.contextassembler.v1.ForgetResponse> forget(
        dev.contextassembler.v1.ForgetRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getForgetMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Lists a subject's memories that the principal may see (it holds every
     * required scope), newest first, a page at a time (a page ends early at
     * `memory.max_page_bytes`). Errors: INVALID_ARGUMENT naming each bad
     * field (`principal.scopes` past 4096 scopes).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.contextassembler.v1.ListMemoriesResponse> listMemories(
        dev.contextassembler.v1.ListMemoriesRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListMemoriesMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_ASSEMBLE = 0;
  private static final int METHODID_COUNT_TOKENS = 1;
  private static final int METHODID_LIST_MODELS = 2;
  private static final int METHODID_ASSEMBLE_BATCH = 3;
  private static final int METHODID_REPORT_USAGE = 4;
  private static final int METHODID_COMPACT = 5;
  private static final int METHODID_RETAIN = 6;
  private static final int METHODID_FORGET = 7;
  private static final int METHODID_LIST_MEMORIES = 8;
  private static final int METHODID_ASSEMBLE_STREAM = 9;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final AssemblerImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(AssemblerImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_ASSEMBLE:
          serviceImpl.assemble((dev.contextassembler.v1.AssembleRequest) request,
              (io.grpc.stub.StreamObserver<dev.contextassembler.v1.AssembleResponse>) responseObserver);
          break;
        case METHODID_COUNT_TOKENS:
          serviceImpl.countTokens((dev.contextassembler.v1.CountTokensRequest) request,
              (io.grpc.stub.StreamObserver<dev.contextassembler.v1.CountTokensResponse>) responseObserver);
          break;
        case METHODID_LIST_MODELS:
          serviceImpl.listModels((dev.contextassembler.v1.ListModelsRequest) request,
              (io.grpc.stub.StreamObserver<dev.contextassembler.v1.ListModelsResponse>) responseObserver);
          break;
        case METHODID_ASSEMBLE_BATCH:
          serviceImpl.assembleBatch((dev.contextassembler.v1.AssembleBatchRequest) request,
              (io.grpc.stub.StreamObserver<dev.contextassembler.v1.AssembleBatchResponse>) responseObserver);
          break;
        case METHODID_REPORT_USAGE:
          serviceImpl.reportUsage((dev.contextassembler.v1.ReportUsageRequest) request,
              (io.grpc.stub.StreamObserver<dev.contextassembler.v1.ReportUsageResponse>) responseObserver);
          break;
        case METHODID_COMPACT:
          serviceImpl.compact((dev.contextassembler.v1.CompactRequest) request,
              (io.grpc.stub.StreamObserver<dev.contextassembler.v1.CompactResponse>) responseObserver);
          break;
        case METHODID_RETAIN:
          serviceImpl.retain((dev.contextassembler.v1.RetainRequest) request,
              (io.grpc.stub.StreamObserver<dev.contextassembler.v1.RetainResponse>) responseObserver);
          break;
        case METHODID_FORGET:
          serviceImpl.forget((dev.contextassembler.v1.ForgetRequest) request,
              (io.grpc.stub.StreamObserver<dev.contextassembler.v1.ForgetResponse>) responseObserver);
          break;
        case METHODID_LIST_MEMORIES:
          serviceImpl.listMemories((dev.contextassembler.v1.ListMemoriesRequest) request,
              (io.grpc.stub.StreamObserver<dev.contextassembler.v1.ListMemoriesResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_ASSEMBLE_STREAM:
          return (io.grpc.stub.StreamObserver<Req>) serviceImpl.assembleStream(
              (io.grpc.stub.StreamObserver<dev.contextassembler.v1.AssembleStreamResponse>) responseObserver);
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class AssemblerBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    AssemblerBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return dev.contextassembler.v1.AssemblerProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Assembler");
    }
  }

  private static final class AssemblerFileDescriptorSupplier
      extends AssemblerBaseDescriptorSupplier {
    AssemblerFileDescriptorSupplier() {}
  }

  private static final class AssemblerMethodDescriptorSupplier
      extends AssemblerBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    AssemblerMethodDescriptorSupplier(String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (AssemblerGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new AssemblerFileDescriptorSupplier())
              .addMethod(getAssembleMethod())
              .addMethod(getCountTokensMethod())
              .addMethod(getListModelsMethod())
              .addMethod(getAssembleBatchMethod())
              .addMethod(getAssembleStreamMethod())
              .addMethod(getReportUsageMethod())
              .addMethod(getCompactMethod())
              .addMethod(getRetainMethod())
              .addMethod(getForgetMethod())
              .addMethod(getListMemoriesMethod())
              .build();
        }
      }
    }
    return result;
  }
}
