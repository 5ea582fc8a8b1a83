package dev.contextassembler.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;

import com.google.protobuf.Any;
import com.google.protobuf.ByteString;
import com.google.protobuf.Duration;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import dev.contextassembler.v1.BlockKind;
import dev.contextassembler.v1.BlockNeed;
import dev.contextassembler.v1.BudgetOverflowDetail;
import dev.contextassembler.v1.RequestError;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import org.junit.Test;

/**
 * The decoder on statuses built here: the details a client cannot make a live sidecar send
 * (OVERLOADED with RetryInfo, SHUTTING_DOWN), and the edges (no details, undecodable bytes).
 */
public class AssemblerErrorsTest {
  private static ErrorInfo info(String reason, String... metadata) {
    ErrorInfo.Builder info = ErrorInfo.newBuilder().setReason(reason)
        .setDomain(AssemblerErrors.DOMAIN);
    for (int i = 0; i + 1 < metadata.length; i += 2) {
      info.putMetadata(metadata[i], metadata[i + 1]);
    }
    return info.build();
  }

  @Test
  public void overloadedCarriesItsRetryDelay() {
    com.google.rpc.Status status = com.google.rpc.Status.newBuilder()
        .setCode(Status.Code.RESOURCE_EXHAUSTED.value()).setMessage("overloaded")
        .addDetails(Any.pack(info(AssemblerErrors.OVERLOADED, "limit", "8", "value", "8")))
        .addDetails(Any.pack(RetryInfo.newBuilder()
            .setRetryDelay(Duration.newBuilder().setNanos(50_000_000)).build()))
        .build();
    StatusRuntimeException e = StatusProto.toStatusRuntimeException(status);

    AssemblerErrors.Details d = AssemblerErrors.fromThrowable(e);
    assertEquals(Status.Code.RESOURCE_EXHAUSTED, d.code());
    assertEquals(AssemblerErrors.OVERLOADED, d.reason());
    assertEquals("8", d.metadata("limit").orElseThrow());
    assertEquals(java.time.Duration.ofMillis(50), d.retryDelay().orElseThrow());
    assertFalse(d.badRequest().isPresent());
    assertFalse(d.budgetOverflow().isPresent());
  }

  @Test
  public void shuttingDownIsUnavailableWithItsReason() {
    com.google.rpc.Status status = com.google.rpc.Status.newBuilder()
        .setCode(Status.Code.UNAVAILABLE.value()).setMessage("draining")
        .addDetails(Any.pack(info(AssemblerErrors.SHUTTING_DOWN)))
        .build();
    AssemblerErrors.Details d =
        AssemblerErrors.fromThrowable(new RuntimeException(StatusProto.toStatusException(status)));
    assertEquals(Status.Code.UNAVAILABLE, d.code());
    assertEquals(AssemblerErrors.SHUTTING_DOWN, d.reason());
    assertFalse(d.retryDelay().isPresent());
    assertEquals("UNAVAILABLE SHUTTING_DOWN: draining", d.toString());
  }

  @Test
  public void aRequestErrorsStatusDetailsDecodeLikeAUnaryCalls() {
    BudgetOverflowDetail overflow = BudgetOverflowDetail.newBuilder()
        .setModel("gpt-4o").setBudget(100).setNonCuttableTokens(900)
        .addBlocks(BlockNeed.newBuilder().setName("account").setIndex(1)
            .setKind(BlockKind.BLOCK_KIND_STATE).setTokens(850))
        .build();
    com.google.rpc.Status status = com.google.rpc.Status.newBuilder()
        .setCode(Status.Code.FAILED_PRECONDITION.value()).setMessage("over budget")
        .addDetails(Any.pack(info(AssemblerErrors.BUDGET_OVERFLOW, "budget", "100")))
        .addDetails(Any.pack(overflow))
        .build();
    RequestError error = RequestError.newBuilder().setCode(status.getCode())
        .setMessage(status.getMessage()).setStatusDetails(status.toByteString()).build();

    AssemblerErrors.Details d = AssemblerErrors.fromRequestError(error);
    assertEquals(Status.Code.FAILED_PRECONDITION, d.code());
    assertEquals(AssemblerErrors.BUDGET_OVERFLOW, d.reason());
    assertEquals(overflow, d.budgetOverflow().orElseThrow());
    assertEquals(status, d.status());
  }

  @Test
  public void badRequestFieldsAreListedInOrder() {
    com.google.rpc.Status status = com.google.rpc.Status.newBuilder()
        .setCode(Status.Code.INVALID_ARGUMENT.value())
        .addDetails(Any.pack(BadRequest.newBuilder()
            .addFieldViolations(BadRequest.FieldViolation.newBuilder().setField("model"))
            .addFieldViolations(BadRequest.FieldViolation.newBuilder().setField("query"))
            .build()))
        .build();
    assertEquals(java.util.List.of("model", "query"),
        AssemblerErrors.fromStatus(status).badFields());
  }

  @Test
  public void withoutDetailsTheCodeAndMessageRemain() {
    AssemblerErrors.Details plain = AssemblerErrors.fromThrowable(
        Status.DEADLINE_EXCEEDED.withDescription("too slow").asRuntimeException());
    assertEquals(Status.Code.DEADLINE_EXCEEDED, plain.code());
    assertEquals("too slow", plain.message());
    assertEquals("", plain.reason());
    assertTrue(plain.badFields().isEmpty());

    AssemblerErrors.Details garbled = AssemblerErrors.fromRequestError(RequestError.newBuilder()
        .setCode(Status.Code.INTERNAL.value()).setMessage("boom")
        .setStatusDetails(ByteString.copyFrom(new byte[] {(byte) 0xff, 0x01})).build());
    assertEquals(Status.Code.INTERNAL, garbled.code());
    assertEquals("boom", garbled.message());
    assertFalse(garbled.errorInfo().isPresent());

    assertEquals(Status.Code.UNKNOWN,
        AssemblerErrors.fromThrowable(new IllegalStateException("no status")).code());
  }
}
