package dev.contextassembler.client;

import io.netty.buffer.ByteBuf;
import io.netty.channel.ChannelException;
import io.netty.channel.ChannelFuture;
import io.netty.channel.ChannelOption;
import io.netty.channel.ChannelPromise;
import io.netty.channel.DefaultChannelConfig;
import io.netty.channel.FileRegion;
import io.netty.channel.nio.AbstractNioByteChannel;
import java.io.IOException;
import java.net.SocketAddress;
import java.net.StandardProtocolFamily;
import java.nio.channels.SelectionKey;
import java.nio.channels.SocketChannel;

/**
 * A Netty channel over the JDK's own Unix domain socket ({@code SocketChannel} of {@link
 * StandardProtocolFamily#UNIX}, Java 16 and later), served by a {@code NioEventLoopGroup}.
 *
 * <p>Why not Netty's epoll domain sockets: they need Netty's native library for the platform
 * (a classified {@code netty-transport-native-epoll} jar; Debian's Netty ships none), while the
 * JDK's socket needs nothing. The bytes are read and written as {@code NioSocketChannel} does
 * over TCP; only TCP's socket options are missing.
 */
final class UnixSocketChannel extends AbstractNioByteChannel {
  private final Config config = new Config(this);

  private UnixSocketChannel(SocketChannel socket) {
    super(null, socket);
  }

  /**
   * A new, unconnected channel (a {@code ChannelFactory} for {@code NettyChannelBuilder}).
   *
   * @return the channel
   * @throws ChannelException when the JDK cannot open a Unix domain socket
   */
  static UnixSocketChannel open() {
    try {
      return new UnixSocketChannel(SocketChannel.open(StandardProtocolFamily.UNIX));
    } catch (IOException e) {
      throw new ChannelException("cannot open a Unix domain socket", e);
    }
  }

  private SocketChannel socket() {
    return (SocketChannel) javaChannel();
  }

  @Override
  public DefaultChannelConfig config() {
    return config;
  }

  @Override
  public boolean isActive() {
    SocketChannel socket = socket();
    return socket.isOpen() && socket.isConnected();
  }

  @Override
  protected SocketAddress localAddress0() {
    try {
      return socket().getLocalAddress();
    } catch (IOException e) {
      return null;
    }
  }

  @Override
  protected SocketAddress remoteAddress0() {
    try {
      return socket().getRemoteAddress();
    } catch (IOException e) {
      return null;
    }
  }

  @Override
  protected void doBind(SocketAddress local) throws Exception {
    socket().bind(local);
  }

  @Override
  protected boolean doConnect(SocketAddress remote, SocketAddress local) throws Exception {
    if (local != null) {
      doBind(local);
    }
    boolean done = false;
    try {
      boolean connected = socket().connect(remote);
      if (!connected) {
        selectionKey().interestOps(SelectionKey.OP_CONNECT);
      }
      done = true;
      return connected;
    } finally {
      if (!done) {
        doClose();
      }
    }
  }

  @Override
  protected void doFinishConnect() throws Exception {
    if (!socket().finishConnect()) {
      throw new IllegalStateException("the Unix socket is not connected after OP_CONNECT");
    }
  }

  @Override
  protected void doDisconnect() throws Exception {
    doClose();
  }

  @Override
  protected void doClose() throws Exception {
    super.doClose();
    socket().close();
  }

  @Override
  protected ChannelFuture shutdownInput() {
    ChannelPromise promise = newPromise();
    try {
      socket().shutdownInput();
      promise.setSuccess();
    } catch (IOException e) {
      promise.setFailure(e);
    }
    return promise;
  }

  @Override
  protected int doReadBytes(ByteBuf buf) throws Exception {
    int attempted = buf.writableBytes();
    unsafe().recvBufAllocHandle().attemptedBytesRead(attempted);
    return buf.writeBytes(socket(), attempted);
  }

  @Override
  protected int doWriteBytes(ByteBuf buf) throws Exception {
    return buf.readBytes(socket(), buf.readableBytes());
  }

  @Override
  protected long doWriteFileRegion(FileRegion region) throws Exception {
    return region.transferTo(socket(), region.transferred());
  }

  /** The channel's options: Netty's defaults; TCP's keepalive accepted and ignored. */
  private static final class Config extends DefaultChannelConfig {
    Config(UnixSocketChannel channel) {
      super(channel);
    }

    @Override
    public <T> boolean setOption(ChannelOption<T> option, T value) {
      // gRPC asks every connection for SO_KEEPALIVE, which a Unix socket has no use for (its
      // own keepalive pings still run); accepted here so Netty does not warn about it on each
      // connection.
      if (option == ChannelOption.SO_KEEPALIVE) {
        return true;
      }
      return super.setOption(option, value);
    }
  }
}
