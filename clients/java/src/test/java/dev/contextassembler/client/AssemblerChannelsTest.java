package dev.contextassembler.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.TlsChannelCredentials;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.Test;

/** The channel defaults, without a server. */
public class AssemblerChannelsTest {
  @Test
  public void loopbackTargetsArePlaintextOthersAreNot() {
    assertTrue(AssemblerChannels.isLoopback("127.0.0.1:50051"));
    assertTrue(AssemblerChannels.isLoopback("localhost:50051"));
    assertTrue(AssemblerChannels.isLoopback("[::1]:50051"));
    assertTrue(AssemblerChannels.isLoopback("dns:///127.0.0.1:50051"));
    assertFalse(AssemblerChannels.isLoopback("sidecar.internal:50051"));
    assertFalse(AssemblerChannels.isLoopback("10.0.0.7:50051"));
    assertFalse(AssemblerChannels.isLoopback("dns:///localhost.example.com:50051"));
  }

  @Test
  public void theDefaultCredentialsArePlaintextOnlyForLoopback() {
    assertTrue(AssemblerChannels.defaultCredentials("127.0.0.1:50051")
        instanceof InsecureChannelCredentials);
    assertTrue(AssemblerChannels.defaultCredentials("sidecar.internal:443")
        instanceof TlsChannelCredentials);
  }

  @Test
  public void unixTargetsArePlaintextToTheSocketTheyName() {
    assertTrue(AssemblerChannels.isUnix("unix:/run/sidecar/grpc.sock"));
    assertFalse(AssemblerChannels.isUnix("127.0.0.1:50051"));
    assertTrue(AssemblerChannels.defaultCredentials("unix:/run/sidecar/grpc.sock")
        instanceof InsecureChannelCredentials);
    Path socket = Path.of("/run/sidecar/grpc.sock");
    assertEquals(socket, UnixSockets.path("unix:/run/sidecar/grpc.sock"));
    assertEquals(socket, UnixSockets.path("unix:///run/sidecar/grpc.sock"));
    assertEquals(Path.of("grpc.sock"), UnixSockets.path("unix:grpc.sock"));
    assertThrows(IllegalArgumentException.class, () -> UnixSockets.path("unix://host/grpc.sock"));
    assertThrows(IllegalArgumentException.class, () -> UnixSockets.path("unix:"));
  }

  @Test
  public void aUnixChannelSendsLocalhostNotThePathAsItsAuthority() throws InterruptedException {
    // The sidecar resets a call whose :authority is a path (RST_STREAM PROTOCOL_ERROR).
    ManagedChannel channel = AssemblerChannels.forTarget("unix:/run/sidecar/grpc.sock");
    try {
      assertEquals("localhost", channel.authority());
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  @SuppressWarnings("unchecked")
  public void theServiceConfigRetriesUnavailableOnTheAssembler() {
    Map<String, Object> method = (Map<String, Object>)
        ((List<Object>) AssemblerChannels.defaultServiceConfig().get("methodConfig")).get(0);
    assertEquals(List.of(Map.of("service", AssemblerChannels.SERVICE)), method.get("name"));
    Map<String, Object> retry = (Map<String, Object>) method.get("retryPolicy");
    assertEquals(List.of("UNAVAILABLE"), retry.get("retryableStatusCodes"));
    assertEquals((double) AssemblerChannels.RETRY_MAX_ATTEMPTS, retry.get("maxAttempts"));
  }

  @Test
  public void aChannelBuildsWithTheDefaults() throws InterruptedException {
    // gRPC parses the service config when the channel is built: a malformed one throws here.
    ManagedChannel channel = AssemblerChannels.forTarget("127.0.0.1:1");
    channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
  }
}
