package dev.contextassembler.client;

import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.TlsChannelCredentials;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Channels to the sidecar with the defaults a gateway wants: keepalive pings, retries of
 * UNAVAILABLE by a service config, a larger inbound message limit, plaintext to a loopback
 * address or a Unix socket and TLS to any other.
 *
 * <pre>{@code
 * ManagedChannel channel = AssemblerChannels.forTarget("127.0.0.1:50051");
 * // or, to a sidecar listening on unix:/var/run/sidecar/grpc.sock:
 * ManagedChannel channel = AssemblerChannels.forTarget("unix:/var/run/sidecar/grpc.sock");
 * AssemblerGrpc.AssemblerBlockingStub stub = AssemblerGrpc.newBlockingStub(channel);
 * }</pre>
 */
public final class AssemblerChannels {
  /** The service every method of the contract belongs to, as a service config names it. */
  public static final String SERVICE = "context_assembler.v1.Assembler";
  /** Seconds between keepalive pings on a connection with calls in flight. */
  public static final long KEEPALIVE_TIME_SECONDS = 30;
  /** Seconds to wait for a ping's answer before the connection is closed. */
  public static final long KEEPALIVE_TIMEOUT_SECONDS = 10;
  /** Largest response accepted, in bytes (gRPC's default is 4 MiB; prompts can be larger). */
  public static final int MAX_INBOUND_MESSAGE_BYTES = 64 * 1024 * 1024;
  /** Attempts of one call answered UNAVAILABLE, the first included. */
  public static final int RETRY_MAX_ATTEMPTS = 4;
  /**
   * The authority sent to a sidecar on a Unix socket. grpc-java would send the socket's path,
   * which is no URI authority: the sidecar's HTTP/2 server (Rust's h2) resets every such call
   * with RST_STREAM PROTOCOL_ERROR.
   */
  public static final String UNIX_AUTHORITY = "localhost";

  private AssemblerChannels() {}

  /**
   * The default service config: every method of {@link #SERVICE} is retried on UNAVAILABLE (a
   * sidecar restarting or draining; its memory store busy) with exponential back-off, at most
   * {@link #RETRY_MAX_ATTEMPTS} attempts. Retrying is safe: assembling has no side effect, and
   * Retain is idempotent by its {@code idempotency_key}. RESOURCE_EXHAUSTED (OVERLOADED) is not
   * retried here: its RetryInfo says how long to wait (see {@link AssemblerErrors}).
   *
   * @return the config, as {@link ManagedChannelBuilder#defaultServiceConfig} takes it (numbers
   *     as {@link Double})
   */
  public static Map<String, Object> defaultServiceConfig() {
    Map<String, Object> retryPolicy = Map.of(
        "maxAttempts", (double) RETRY_MAX_ATTEMPTS,
        "initialBackoff", "0.1s",
        "maxBackoff", "2s",
        "backoffMultiplier", 2.0,
        "retryableStatusCodes", List.of("UNAVAILABLE"));
    Map<String, Object> methodConfig = Map.of(
        "name", List.of(Map.of("service", SERVICE)),
        "retryPolicy", retryPolicy);
    return Map.of("methodConfig", List.of(methodConfig));
  }

  /**
   * A builder for {@code target} with the defaults applied: plaintext to a Unix socket or when
   * the target's host is a loopback address ({@code localhost}, {@code 127.0.0.1}, {@code
   * [::1]}), else TLS trusting the system's roots. The caller may change anything before {@code
   * build()}.
   *
   * @param target {@code host:port}, {@code unix:/path} or a gRPC target URI
   * @return the builder
   */
  public static ManagedChannelBuilder<?> builder(String target) {
    return builder(target, defaultCredentials(target));
  }

  /** Plaintext to a Unix socket or a loopback target; TLS with the system's roots to any other. */
  static ChannelCredentials defaultCredentials(String target) {
    return isUnix(target) || isLoopback(target)
        ? InsecureChannelCredentials.create()
        : TlsChannelCredentials.create();
  }

  /**
   * A builder for {@code target} with the defaults applied and the given credentials: for TLS
   * with a private CA or a client certificate, pass {@code TlsChannelCredentials.newBuilder()
   * .trustManager(caFile).keyManager(certFile, keyFile).build()}.
   *
   * <p>A {@code unix:} target ({@code unix:/absolute/path}, {@code unix:///absolute/path} or
   * {@code unix:relative/path}) is dialled with Netty over the JDK's Unix domain socket and sends
   * {@link #UNIX_AUTHORITY} as its authority; it needs {@code grpc-netty} on the class path. The
   * sidecar serves no TLS on a socket.
   *
   * @param target {@code host:port}, {@code unix:/path} or a gRPC target URI
   * @param credentials how to secure the connection
   * @return the builder
   */
  public static ManagedChannelBuilder<?> builder(String target, ChannelCredentials credentials) {
    ManagedChannelBuilder<?> builder = isUnix(target)
        ? UnixSockets.builder(target, credentials)
        : Grpc.newChannelBuilder(target, credentials);
    return builder
        .keepAliveTime(KEEPALIVE_TIME_SECONDS, TimeUnit.SECONDS)
        .keepAliveTimeout(KEEPALIVE_TIMEOUT_SECONDS, TimeUnit.SECONDS)
        .maxInboundMessageSize(MAX_INBOUND_MESSAGE_BYTES)
        .defaultServiceConfig(defaultServiceConfig())
        .enableRetry();
  }

  /**
   * A channel to {@code target} with the defaults ({@link #builder(String)}).
   *
   * @param target {@code host:port}, {@code unix:/path} or a gRPC target URI
   * @return the channel; shut it down when done
   */
  public static ManagedChannel forTarget(String target) {
    return builder(target).build();
  }

  /**
   * Whether {@code target} names a Unix domain socket, in gRPC's naming.
   *
   * @param target a gRPC target
   * @return true when it starts with {@code unix:}
   */
  public static boolean isUnix(String target) {
    return target.startsWith("unix:");
  }

  /**
   * Whether {@code target}'s host is a loopback address, where plaintext is safe.
   *
   * @param target {@code host:port}, {@code [v6]:port} or a URI such as {@code dns:///host:port}
   * @return true for {@code localhost}, {@code 127.x.x.x} and {@code ::1}
   */
  public static boolean isLoopback(String target) {
    String authority = target;
    int scheme = authority.indexOf("://");
    if (scheme >= 0) {
      authority = authority.substring(scheme + 3);
      int slash = authority.indexOf('/');
      if (slash >= 0) {
        authority = authority.substring(slash + 1);
      }
    }
    String host;
    if (authority.startsWith("[")) {
      int close = authority.indexOf(']');
      host = close > 0 ? authority.substring(1, close) : authority;
    } else {
      int colon = authority.lastIndexOf(':');
      host = colon >= 0 ? authority.substring(0, colon) : authority;
    }
    return host.equals("localhost") || host.equals("::1") || host.startsWith("127.");
  }
}
