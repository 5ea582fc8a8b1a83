package dev.contextassembler.client;

import io.grpc.ChannelCredentials;
import io.grpc.ManagedChannelBuilder;
import io.grpc.netty.NettyChannelBuilder;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.util.concurrent.DefaultThreadFactory;
import java.net.UnixDomainSocketAddress;
import java.nio.file.Path;

/**
 * Channels to a sidecar on a Unix domain socket: {@code unix:} targets, in gRPC's naming
 * ({@code unix:/absolute/path}, {@code unix:///absolute/path}, {@code unix:relative/path}).
 *
 * <p>Loaded only for such a target (nothing outside names a Netty type), so an application that
 * never dials one needs no Netty on its class path.
 */
final class UnixSockets {
  private UnixSockets() {}

  /** The event loops of every Unix socket channel: daemon threads, started when first needed. */
  private static final class Loops {
    static final EventLoopGroup GROUP =
        new NioEventLoopGroup(0, new DefaultThreadFactory("context-assembler-unix", true));
  }

  /**
   * The socket's path in a {@code unix:} target.
   *
   * @param target {@code unix:PATH} or {@code unix://ABSOLUTE_PATH}
   * @return the path
   * @throws IllegalArgumentException when the target is not a {@code unix:} target, names no
   *     path, or has an authority ({@code unix://host/path})
   */
  static Path path(String target) {
    if (!AssemblerChannels.isUnix(target)) {
      throw new IllegalArgumentException("not a unix: target: " + target);
    }
    String path = target.substring("unix:".length());
    if (path.startsWith("//")) {
      path = path.substring(2);
      if (!path.startsWith("/")) {
        throw new IllegalArgumentException(
            "a unix:// target takes an absolute path (unix:///path), not an authority: " + target);
      }
    }
    if (path.isEmpty()) {
      throw new IllegalArgumentException("a unix: target names no path: " + target);
    }
    return Path.of(path);
  }

  /**
   * A builder for the socket {@code target} names, sending {@link
   * AssemblerChannels#UNIX_AUTHORITY} as the authority.
   *
   * @param target a {@code unix:} target
   * @param credentials how to secure the connection (the sidecar serves plaintext on a socket)
   * @return the builder (Netty's), without the helper's other defaults
   */
  static ManagedChannelBuilder<?> builder(String target, ChannelCredentials credentials) {
    // Without overrideAuthority, grpc-java sends the address's text (the socket's path) as
    // :authority, which the sidecar's HTTP/2 server refuses: RST_STREAM PROTOCOL_ERROR.
    return NettyChannelBuilder.forAddress(UnixDomainSocketAddress.of(path(target)), credentials)
        .channelFactory(UnixSocketChannel::open)
        .eventLoopGroup(Loops.GROUP)
        .overrideAuthority(AssemblerChannels.UNIX_AUTHORITY);
  }
}
