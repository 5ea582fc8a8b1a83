package dev.contextassembler.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import dev.contextassembler.v1.CountTokensRequest;
import dev.contextassembler.v1.CountTokensResponse;
import io.grpc.ManagedChannel;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/**
 * A live sidecar on a Unix socket ({@code CONTEXT_ASSEMBLER_UNIX_ADDR}, {@code unix:/path}),
 * through a channel of {@link AssemblerChannels}: the calls arrive. grpc-java would send the
 * socket's path as the authority, and the sidecar resets every such call (RST_STREAM
 * PROTOCOL_ERROR); without {@link AssemblerChannels#UNIX_AUTHORITY} the wait for SERVING fails.
 */
public class AssemblerUnixSocketTest {
  private static ManagedChannel channel;

  @BeforeClass
  public static void connect() throws InterruptedException {
    channel = LiveServer.connect(LiveServer.UNIX);
  }

  @AfterClass
  public static void close() throws InterruptedException {
    LiveServer.close(channel);
  }

  @Test
  public void aChannelReachesASidecarOnAUnixSocket() {
    CountTokensResponse counted = LiveServer.stub(channel).countTokens(
        CountTokensRequest.newBuilder().setModel(Requests.MODEL).setText("hello world").build());
    assertEquals(2, counted.getTokens());
    assertEquals("o200k_base", counted.getTokenizer());
    assertTrue(counted.getExact());
    assertEquals(AssemblerChannels.UNIX_AUTHORITY, channel.authority());
  }
}
