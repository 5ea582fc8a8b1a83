package dev.contextassembler.client;

import static org.junit.Assert.fail;
import static org.junit.Assume.assumeTrue;

import com.google.protobuf.CodedInputStream;
import dev.contextassembler.v1.AssemblerGrpc;
import io.grpc.CallOptions;
import io.grpc.ManagedChannel;
import io.grpc.MethodDescriptor;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.ClientCalls;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * A sidecar the live tests call, its address read from the environment: {@link #WITH_MEMORY}
 * names one with a memory store, {@link #NO_MEMORY} one without, {@link #UNIX} one on a Unix
 * socket. When the variable is unset the test is skipped, or fails when {@link #REQUIRE} is "1"
 * or CI is "true" (check.sh sets REQUIRE). A channel is handed out once the server's health
 * reports SERVING.
 */
final class LiveServer {
  /** The address of a sidecar with a memory store (SQLite). */
  static final String WITH_MEMORY = "CONTEXT_ASSEMBLER_ADDR";
  /** The address of a sidecar without a memory store. */
  static final String NO_MEMORY = "CONTEXT_ASSEMBLER_ADDR_NO_MEMORY";
  /** The target of a sidecar listening on a Unix socket ({@code unix:/path}). */
  static final String UNIX = "CONTEXT_ASSEMBLER_UNIX_ADDR";
  /** "1": an unset address fails the test instead of skipping it. */
  static final String REQUIRE = "CONTEXT_ASSEMBLER_REQUIRE_SERVER";
  /** Deadline of one call in the tests. */
  static final long RPC_TIMEOUT_SECS = 10;
  private static final long READY_TIMEOUT_MILLIS = 60_000;
  private static final int SERVING = 1;

  // grpc.health.v1.Health/Check without its generated stubs (not in the client's dependencies):
  // the request {service = ""} encodes as no bytes, the answer's field 1 is the status.
  private static final MethodDescriptor<byte[], Integer> HEALTH_CHECK =
      MethodDescriptor.<byte[], Integer>newBuilder()
          .setType(MethodDescriptor.MethodType.UNARY)
          .setFullMethodName("grpc.health.v1.Health/Check")
          .setRequestMarshaller(new MethodDescriptor.Marshaller<byte[]>() {
            @Override
            public InputStream stream(byte[] value) {
              return new ByteArrayInputStream(value);
            }

            @Override
            public byte[] parse(InputStream stream) {
              throw new UnsupportedOperationException("requests are only sent");
            }
          })
          .setResponseMarshaller(new MethodDescriptor.Marshaller<Integer>() {
            @Override
            public InputStream stream(Integer value) {
              throw new UnsupportedOperationException("answers are only read");
            }

            @Override
            public Integer parse(InputStream stream) {
              try {
                CodedInputStream in = CodedInputStream.newInstance(stream);
                int status = 0;
                for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
                  if (tag == (1 << 3)) {
                    status = in.readEnum();
                  } else {
                    in.skipField(tag);
                  }
                }
                return status;
              } catch (IOException e) {
                throw new UncheckedIOException(e);
              }
            }
          })
          .build();

  /** Addresses already seen SERVING: each test class waits only for a server not yet seen. */
  private static final Set<String> READY = ConcurrentHashMap.newKeySet();
  /** Addresses that never became SERVING: later test classes fail at once. */
  private static final Set<String> UNREADY = ConcurrentHashMap.newKeySet();

  private LiveServer() {}

  /** The address in {@code variable}; skips or fails the test when it is unset. */
  static String address(String variable) {
    String addr = System.getenv(variable);
    if (addr == null || addr.isEmpty()) {
      boolean required = "1".equals(System.getenv(REQUIRE)) || "true".equals(System.getenv("CI"));
      if (required) {
        fail(variable + " is not set (required: " + REQUIRE + "=1 or CI=true)");
      }
      assumeTrue(variable + " is not set: live test skipped", false);
    }
    return addr;
  }

  /** A channel (the helper's defaults) to the sidecar in {@code variable}, once it is SERVING. */
  static ManagedChannel connect(String variable) throws InterruptedException {
    String addr = address(variable);
    ManagedChannel channel = AssemblerChannels.forTarget(addr);
    if (READY.contains(addr)) {
      return channel;
    }
    if (UNREADY.contains(addr)) {
      channel.shutdownNow();
      fail("the sidecar at " + addr + " was not SERVING (seen by an earlier test class)");
    }
    long deadline = System.currentTimeMillis() + READY_TIMEOUT_MILLIS;
    String last = "no answer";
    while (System.currentTimeMillis() < deadline) {
      try {
        int status = ClientCalls.blockingUnaryCall(channel, HEALTH_CHECK,
            CallOptions.DEFAULT.withDeadlineAfter(2, TimeUnit.SECONDS), new byte[0]);
        if (status == SERVING) {
          READY.add(addr);
          return channel;
        }
        last = "status " + status;
      } catch (StatusRuntimeException e) {
        last = e.getStatus().toString();
      }
      Thread.sleep(100);
    }
    UNREADY.add(addr);
    channel.shutdownNow();
    fail("the sidecar at " + addr + " was not SERVING in " + READY_TIMEOUT_MILLIS + " ms: " + last);
    return channel;
  }

  /** A blocking stub whose next call has the tests' deadline. */
  static AssemblerGrpc.AssemblerBlockingStub stub(ManagedChannel channel) {
    return AssemblerGrpc.newBlockingStub(channel)
        .withDeadlineAfter(RPC_TIMEOUT_SECS, TimeUnit.SECONDS);
  }

  /** Shuts a channel down, waiting a little for its calls to end. */
  static void close(ManagedChannel channel) throws InterruptedException {
    if (channel != null) {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }
}
