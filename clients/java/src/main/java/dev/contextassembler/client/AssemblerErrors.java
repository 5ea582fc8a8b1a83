package dev.contextassembler.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import dev.contextassembler.v1.BudgetOverflowDetail;
import dev.contextassembler.v1.RequestError;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.List;
import java.util.Optional;

/**
 * The sidecar's errors decoded into the details a program acts on: {@code google.rpc.BadRequest}
 * (which fields are bad), {@code google.rpc.ErrorInfo} (a reason such as {@link
 * #BUDGET_OVERFLOW}, with metadata), {@code google.rpc.RetryInfo} (how long to wait) and {@link
 * BudgetOverflowDetail} (what each part that may never be cut needs). The same details come from
 * a failed unary call ({@link #fromThrowable}) and from one failed request of a batch or stream
 * ({@link #fromRequestError}).
 *
 * <pre>{@code
 * try {
 *   stub.assemble(request);
 * } catch (StatusRuntimeException e) {
 *   AssemblerErrors.Details d = AssemblerErrors.fromThrowable(e);
 *   if (d.reason().equals(AssemblerErrors.BUDGET_OVERFLOW)) {
 *     BudgetOverflowDetail need = d.budgetOverflow().orElseThrow();
 *   }
 * }
 * }</pre>
 */
public final class AssemblerErrors {
  /** {@code ErrorInfo.domain} of the sidecar's errors. */
  public static final String DOMAIN = "context-assembler";
  /** FAILED_PRECONDITION: what may never be cut exceeds the budget (see {@link
   * BudgetOverflowDetail}). */
  public static final String BUDGET_OVERFLOW = "BUDGET_OVERFLOW";
  /** FAILED_PRECONDITION: the model's chat template refuses the prompt. */
  public static final String TEMPLATE_REFUSED = "TEMPLATE_REFUSED";
  /** FAILED_PRECONDITION: the sidecar runs without a memory store. */
  public static final String MEMORY_DISABLED = "MEMORY_DISABLED";
  /** RESOURCE_EXHAUSTED: more blocks than the sidecar's limit (metadata limit, value). */
  public static final String TOO_MANY_BLOCKS = "TOO_MANY_BLOCKS";
  /** RESOURCE_EXHAUSTED: more items than the sidecar's limit (metadata limit, value). */
  public static final String TOO_MANY_ITEMS = "TOO_MANY_ITEMS";
  /** RESOURCE_EXHAUSTED: a batch of more requests than the limit (metadata limit, value). */
  public static final String TOO_MANY_REQUESTS = "TOO_MANY_REQUESTS";
  /** RESOURCE_EXHAUSTED: a request message over the size limit, in bytes. */
  public static final String REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE";
  /** RESOURCE_EXHAUSTED: a request that would take too many bytes to decode. */
  public static final String REQUEST_TOO_COMPLEX = "REQUEST_TOO_COMPLEX";
  /** RESOURCE_EXHAUSTED: no work slot free; wait the RetryInfo delay, then retry. */
  public static final String OVERLOADED = "OVERLOADED";
  /** UNAVAILABLE: the sidecar is draining; retry on another instance. */
  public static final String SHUTTING_DOWN = "SHUTTING_DOWN";
  /** UNAVAILABLE: the memory store cannot answer; retry the same call after RetryInfo's delay. */
  public static final String MEMORY_UNAVAILABLE = "MEMORY_UNAVAILABLE";
  /** PERMISSION_DENIED: a client certificate's identity may not make a claim. */
  public static final String CLAIM_DENIED = "CLAIM_DENIED";

  private AssemblerErrors() {}

  /**
   * The details of a failed call: its {@code grpc-status-details-bin} when present, else its
   * code and description alone.
   *
   * @param t what a stub threw or a stream observer received (a {@code StatusRuntimeException}
   *     or {@code StatusException}, possibly as a cause)
   * @return the details; {@code Status.Code.UNKNOWN} for a throwable that carries no status
   */
  public static Details fromThrowable(Throwable t) {
    com.google.rpc.Status rich = StatusProto.fromThrowable(t);
    if (rich != null) {
      return fromStatus(rich);
    }
    Status status = Status.fromThrowable(t);
    String message = status.getDescription() == null ? "" : status.getDescription();
    return fromStatus(com.google.rpc.Status.newBuilder()
        .setCode(status.getCode().value()).setMessage(message).build());
  }

  /**
   * The details of one request's error in an AssembleBatch or AssembleStream answer: its {@code
   * status_details}, the encoded {@code google.rpc.Status} a unary call would have carried.
   *
   * @param error the request's error
   * @return the details; code and message alone when {@code status_details} is empty or
   *     undecodable
   */
  public static Details fromRequestError(RequestError error) {
    com.google.rpc.Status rich = null;
    if (!error.getStatusDetails().isEmpty()) {
      try {
        rich = com.google.rpc.Status.parseFrom(error.getStatusDetails());
      } catch (InvalidProtocolBufferException e) {
        rich = null;
      }
    }
    if (rich == null) {
      rich = com.google.rpc.Status.newBuilder()
          .setCode(error.getCode()).setMessage(error.getMessage()).build();
    }
    return fromStatus(rich);
  }

  /**
   * The details of a {@code google.rpc.Status}. Details of other types are kept in {@link
   * Details#status()} and otherwise ignored; a detail that does not decode is skipped.
   *
   * @param status the status with its details
   * @return the details
   */
  public static Details fromStatus(com.google.rpc.Status status) {
    BadRequest badRequest = null;
    ErrorInfo errorInfo = null;
    RetryInfo retryInfo = null;
    BudgetOverflowDetail budgetOverflow = null;
    for (Any any : status.getDetailsList()) {
      try {
        if (badRequest == null && any.is(BadRequest.class)) {
          badRequest = any.unpack(BadRequest.class);
        } else if (errorInfo == null && any.is(ErrorInfo.class)) {
          errorInfo = any.unpack(ErrorInfo.class);
        } else if (retryInfo == null && any.is(RetryInfo.class)) {
          retryInfo = any.unpack(RetryInfo.class);
        } else if (budgetOverflow == null && any.is(BudgetOverflowDetail.class)) {
          budgetOverflow = any.unpack(BudgetOverflowDetail.class);
        }
      } catch (InvalidProtocolBufferException e) {
        // A malformed detail is skipped: the others and the code still tell what happened.
      }
    }
    return new Details(status, badRequest, errorInfo, retryInfo, budgetOverflow);
  }

  /** One error's code, message and typed details. Immutable. */
  public static final class Details {
    private final com.google.rpc.Status status;
    private final BadRequest badRequest;
    private final ErrorInfo errorInfo;
    private final RetryInfo retryInfo;
    private final BudgetOverflowDetail budgetOverflow;

    private Details(com.google.rpc.Status status, BadRequest badRequest, ErrorInfo errorInfo,
        RetryInfo retryInfo, BudgetOverflowDetail budgetOverflow) {
      this.status = status;
      this.badRequest = badRequest;
      this.errorInfo = errorInfo;
      this.retryInfo = retryInfo;
      this.budgetOverflow = budgetOverflow;
    }

    /**
     * The gRPC code.
     *
     * @return the code ({@code UNKNOWN} for a number gRPC does not define)
     */
    public Status.Code code() {
      return Status.fromCodeValue(status.getCode()).getCode();
    }

    /**
     * The status message, for people: act on the code and details, not on this text.
     *
     * @return the message, possibly empty
     */
    public String message() {
      return status.getMessage();
    }

    /**
     * The decoded {@code google.rpc.Status}, with every detail as sent.
     *
     * @return the status
     */
    public com.google.rpc.Status status() {
      return status;
    }

    /**
     * The bad fields of an INVALID_ARGUMENT.
     *
     * @return the BadRequest detail, if sent
     */
    public Optional<BadRequest> badRequest() {
      return Optional.ofNullable(badRequest);
    }

    /**
     * The field paths a BadRequest names, such as {@code model} or {@code blocks[2].items[0].id}.
     *
     * @return the paths in the order sent; empty without a BadRequest
     */
    public List<String> badFields() {
      return badRequest == null
          ? List.of()
          : badRequest.getFieldViolationsList().stream()
              .map(BadRequest.FieldViolation::getField).toList();
    }

    /**
     * The reason and metadata of the error.
     *
     * @return the ErrorInfo detail, if sent
     */
    public Optional<ErrorInfo> errorInfo() {
      return Optional.ofNullable(errorInfo);
    }

    /**
     * The ErrorInfo reason, such as {@link #BUDGET_OVERFLOW}.
     *
     * @return the reason; empty without an ErrorInfo
     */
    public String reason() {
      return errorInfo == null ? "" : errorInfo.getReason();
    }

    /**
     * One ErrorInfo metadata value, such as {@code limit} of {@link #TOO_MANY_BLOCKS}.
     *
     * @param key the metadata key
     * @return the value, if the ErrorInfo carries the key
     */
    public Optional<String> metadata(String key) {
      return errorInfo == null || !errorInfo.containsMetadata(key)
          ? Optional.empty()
          : Optional.of(errorInfo.getMetadataOrThrow(key));
    }

    /**
     * How long to wait before retrying.
     *
     * @return the RetryInfo detail, if sent
     */
    public Optional<RetryInfo> retryInfo() {
      return Optional.ofNullable(retryInfo);
    }

    /**
     * The RetryInfo delay as a {@link Duration}.
     *
     * @return the delay, if a RetryInfo with a delay was sent
     */
    public Optional<Duration> retryDelay() {
      if (retryInfo == null || !retryInfo.hasRetryDelay()) {
        return Optional.empty();
      }
      com.google.protobuf.Duration d = retryInfo.getRetryDelay();
      return Optional.of(Duration.ofSeconds(d.getSeconds(), d.getNanos()));
    }

    /**
     * What each part that may never be cut needs, of a {@link #BUDGET_OVERFLOW}.
     *
     * @return the detail, if sent
     */
    public Optional<BudgetOverflowDetail> budgetOverflow() {
      return Optional.ofNullable(budgetOverflow);
    }

    /**
     * The code, reason and message on one line, for logs.
     *
     * @return for example {@code RESOURCE_EXHAUSTED TOO_MANY_BLOCKS: too many blocks}
     */
    @Override
    public String toString() {
      String why = reason().isEmpty() ? "" : " " + reason();
      return code() + why + ": " + message();
    }
  }
}
