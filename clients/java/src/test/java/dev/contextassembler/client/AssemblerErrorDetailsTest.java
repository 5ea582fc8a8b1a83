package dev.contextassembler.client;

import static dev.contextassembler.client.LiveServer.stub;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import com.google.rpc.ErrorInfo;
import dev.contextassembler.v1.AssembleRequest;
import dev.contextassembler.v1.Block;
import dev.contextassembler.v1.BlockKind;
import dev.contextassembler.v1.BlockNeed;
import dev.contextassembler.v1.BudgetOverflowDetail;
import dev.contextassembler.v1.ForgetRequest;
import dev.contextassembler.v1.Item;
import dev.contextassembler.v1.Observation;
import dev.contextassembler.v1.ReportUsageRequest;
import dev.contextassembler.v1.RetainRequest;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;
import org.junit.function.ThrowingRunnable;

/**
 * The error details a caller sees from a live sidecar, decoded by {@link AssemblerErrors}: one
 * test per detail the contract documents and a client can trigger.
 */
public class AssemblerErrorDetailsTest {
  /** The sidecar's default {@code limits.max_blocks}. */
  private static final int MAX_BLOCKS = 64;
  private static final int SMALL_BUDGET = 100;

  private static ManagedChannel channel;

  @BeforeClass
  public static void connect() throws InterruptedException {
    channel = LiveServer.connect(LiveServer.WITH_MEMORY);
  }

  @AfterClass
  public static void close() throws InterruptedException {
    LiveServer.close(channel);
  }

  /** The details of the error {@code call} throws; fails when it answers. */
  static AssemblerErrors.Details refused(ThrowingRunnable call) {
    try {
      call.run();
    } catch (StatusRuntimeException e) {
      return AssemblerErrors.fromThrowable(e);
    } catch (Throwable t) {
      throw new AssertionError("expected a StatusRuntimeException", t);
    }
    fail("the call was answered; an error was expected");
    return null;
  }

  private static void assertErrorInfo(AssemblerErrors.Details d, Status.Code code, String reason) {
    assertEquals(d.toString(), code, d.code());
    ErrorInfo info = d.errorInfo().orElseThrow(() -> new AssertionError("no ErrorInfo: " + d));
    assertEquals(reason, info.getReason());
    assertEquals(AssemblerErrors.DOMAIN, info.getDomain());
  }

  @Test
  public void invalidArgumentNamesTheBadFields() {
    AssembleRequest request = AssembleRequest.newBuilder()
        .setRequestId("java-bad").setModel("no-such-model").build();
    AssemblerErrors.Details d = refused(() -> stub(channel).assemble(request));
    assertEquals(Status.Code.INVALID_ARGUMENT, d.code());
    assertTrue("BadRequest names model: " + d.badFields(), d.badFields().contains("model"));
  }

  @Test
  public void budgetOverflowSaysWhatEachNonCuttablePartNeeds() {
    String facts = "The account holds an annual plan renewed every year in March. ".repeat(60);
    AssembleRequest request = Requests.minimal("java-overflow", "Can I get a refund?")
        .setMaxInputTokens(SMALL_BUDGET)
        .addBlocks(Block.newBuilder().setName("kb").setKind(BlockKind.BLOCK_KIND_EVIDENCE)
            .addItems(Item.newBuilder().setId("doc").setContent("Refunds take 5 days.")))
        .addBlocks(Block.newBuilder().setName("account").setKind(BlockKind.BLOCK_KIND_STATE)
            .addItems(Item.newBuilder().setId("facts").setTrusted(true).setContent(facts)))
        .build();
    AssemblerErrors.Details d = refused(() -> stub(channel).assemble(request));

    assertErrorInfo(d, Status.Code.FAILED_PRECONDITION, AssemblerErrors.BUDGET_OVERFLOW);
    long nonCuttable = Long.parseLong(d.metadata("non_cuttable_tokens").orElseThrow());
    long budget = Long.parseLong(d.metadata("budget").orElseThrow());
    assertEquals(Requests.MODEL, d.metadata("model").orElseThrow());
    assertTrue(nonCuttable > budget);

    BudgetOverflowDetail detail = d.budgetOverflow()
        .orElseThrow(() -> new AssertionError("no BudgetOverflowDetail beside " + d));
    assertEquals(budget, detail.getBudget());
    assertEquals(nonCuttable, detail.getNonCuttableTokens());
    assertTrue("non_cuttable_tokens " + nonCuttable + " > budget " + detail.getBudget(),
        detail.getNonCuttableTokens() > detail.getBudget());
    BlockNeed account = detail.getBlocksList().stream()
        .filter(b -> b.getName().equals("account")).findFirst()
        .orElseThrow(() -> new AssertionError("block account not in " + detail.getBlocksList()));
    assertEquals("its index in the request", 1, account.getIndex());
    assertEquals(BlockKind.BLOCK_KIND_STATE, account.getKind());
    assertTrue("the STATE block alone is over the budget", account.getTokens() > budget);
    long blocks = detail.getBlocksList().stream().mapToLong(BlockNeed::getTokens).sum();
    assertEquals("the parts add up to non_cuttable_tokens",
        detail.getNonCuttableTokens(),
        detail.getStaticPrefixTokens() + detail.getToolsTokens() + detail.getQueryTokens()
            + detail.getFramingTokens() + blocks + detail.getTemplateTokens());
  }

  @Test
  public void tooManyBlocksCarriesTheLimitAndTheValue() {
    AssembleRequest.Builder request = Requests.minimal("java-blocks", "hi");
    for (int i = 0; i <= MAX_BLOCKS; i++) {
      request.addBlocks(Block.newBuilder().setName("b" + i).setKind(BlockKind.BLOCK_KIND_EVIDENCE)
          .addItems(Item.newBuilder().setId("i").setContent("x")));
    }
    AssemblerErrors.Details d = refused(() -> stub(channel).assemble(request.build()));
    assertErrorInfo(d, Status.Code.RESOURCE_EXHAUSTED, AssemblerErrors.TOO_MANY_BLOCKS);
    assertEquals(String.valueOf(MAX_BLOCKS), d.metadata("limit").orElseThrow());
    assertEquals(String.valueOf(MAX_BLOCKS + 1), d.metadata("value").orElseThrow());
  }

  @Test
  public void retainWithoutAMemoryStoreIsMemoryDisabled() throws InterruptedException {
    ManagedChannel noMemory = LiveServer.connect(LiveServer.NO_MEMORY);
    try {
      RetainRequest request = RetainRequest.newBuilder()
          .setIdempotencyKey("java-disabled").setSubject("clients/java/disabled")
          .addObservations(Observation.newBuilder().setType("decision").setText("x"))
          .build();
      AssemblerErrors.Details d = refused(() -> stub(noMemory).retain(request));
      assertErrorInfo(d, Status.Code.FAILED_PRECONDITION, AssemblerErrors.MEMORY_DISABLED);
    } finally {
      LiveServer.close(noMemory);
    }
  }

  @Test
  public void forgetWithoutASubjectNamesSubject() {
    AssemblerErrors.Details d = refused(
        () -> stub(channel).forget(ForgetRequest.newBuilder().addIds("0".repeat(32)).build()));
    assertEquals(Status.Code.INVALID_ARGUMENT, d.code());
    assertTrue("BadRequest names subject: " + d.badFields(), d.badFields().contains("subject"));
  }

  @Test
  public void reportUsageWithoutAProviderNamesProvider() {
    AssemblerErrors.Details d = refused(() -> stub(channel).reportUsage(
        ReportUsageRequest.newBuilder().setRequestId("java-report").setPromptTokens(1).build()));
    assertEquals(Status.Code.INVALID_ARGUMENT, d.code());
    assertTrue("BadRequest names provider: " + d.badFields(), d.badFields().contains("provider"));
  }
}
