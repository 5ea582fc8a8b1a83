package dev.contextassembler.client;

import static dev.contextassembler.client.LiveServer.stub;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertTrue;

import dev.contextassembler.v1.AssembleBatchRequest;
import dev.contextassembler.v1.AssembleBatchResponse;
import dev.contextassembler.v1.AssembleRequest;
import dev.contextassembler.v1.AssembleResponse;
import dev.contextassembler.v1.AssembleResult;
import dev.contextassembler.v1.AssembleStreamResponse;
import dev.contextassembler.v1.AssemblerGrpc;
import dev.contextassembler.v1.BatchGroup;
import dev.contextassembler.v1.Block;
import dev.contextassembler.v1.BlockDecision;
import dev.contextassembler.v1.BlockKind;
import dev.contextassembler.v1.CompactOutcome;
import dev.contextassembler.v1.CompactProvenance;
import dev.contextassembler.v1.CompactRequest;
import dev.contextassembler.v1.CompactResponse;
import dev.contextassembler.v1.ContentBlock;
import dev.contextassembler.v1.ConversationMessage;
import dev.contextassembler.v1.CountTokensRequest;
import dev.contextassembler.v1.CountTokensResponse;
import dev.contextassembler.v1.ForgetRequest;
import dev.contextassembler.v1.ForgetResponse;
import dev.contextassembler.v1.ListMemoriesRequest;
import dev.contextassembler.v1.ListMemoriesResponse;
import dev.contextassembler.v1.ListModelsRequest;
import dev.contextassembler.v1.Message;
import dev.contextassembler.v1.ModelInfo;
import dev.contextassembler.v1.Observation;
import dev.contextassembler.v1.PinnedItem;
import dev.contextassembler.v1.Principal;
import dev.contextassembler.v1.RecallReport;
import dev.contextassembler.v1.ReportUsageRequest;
import dev.contextassembler.v1.ReportUsageResponse;
import dev.contextassembler.v1.RetainRequest;
import dev.contextassembler.v1.RetainResponse;
import dev.contextassembler.v1.Role;
import dev.contextassembler.v1.StoredMemory;
import dev.contextassembler.v1.Usage;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.stub.StreamObserver;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/**
 * Every RPC of the contract against a live sidecar with a memory store ({@code
 * CONTEXT_ASSEMBLER_ADDR}), through a channel of {@link AssemblerChannels}. The checks of the
 * former smoke client are here, one test per behaviour.
 */
public class AssemblerRpcTest {
  private static final String MEMORY_SCOPE = "support";
  private static final String MEMORY_TYPE = "decision";
  private static final String MEMORY_TEXT =
      "Refund approved for order A-1009: the annual plan was bought within the 14-day window.";
  private static final String MEMORY_PHRASE = "within the 14-day window";
  private static final String RECALL_QUERY = "Was the refund for order A-1009 approved?";
  /** Recall.block left empty names this block. */
  private static final String RECALL_BLOCK = "recalled_memories";
  private static final String RETAIN_REQUEST_ID = "java-retain";
  private static final int PRESERVE_RECENT = 3;

  private static ManagedChannel channel;

  @BeforeClass
  public static void connect() throws InterruptedException {
    channel = LiveServer.connect(LiveServer.WITH_MEMORY);
  }

  @AfterClass
  public static void close() throws InterruptedException {
    LiveServer.close(channel);
  }

  /** A subject no earlier run used: the memory database outlives a run. */
  private static String freshSubject() {
    return "clients/java/" + UUID.randomUUID();
  }

  private static boolean rendered(AssembleResponse resp, String text) {
    return resp.getMessagesList().stream().anyMatch(m -> m.getContent().contains(text));
  }

  private static RetainRequest retainRequest(String subject) {
    return RetainRequest.newBuilder()
        .setIdempotencyKey(subject + "/turn-1")
        .setSubject(subject)
        .addRequiredScopes(MEMORY_SCOPE)
        .setRequestId(RETAIN_REQUEST_ID)
        .setTurn(1)
        .addObservations(Observation.newBuilder().setType(MEMORY_TYPE).setText(MEMORY_TEXT)
            .addFacts("order: A-1009").addFacts("refund: full"))
        .build();
  }

  /** Retains the one scoped decision under {@code subject}; returns its id. */
  private static String retainOne(String subject) {
    RetainResponse resp = stub(channel).retain(retainRequest(subject));
    assertEquals(1, resp.getMemoryIdsCount());
    return resp.getMemoryIds(0);
  }

  @Test
  public void listModelsListsGpt4o() {
    List<ModelInfo> models =
        stub(channel).listModels(ListModelsRequest.getDefaultInstance()).getModelsList();
    assertTrue("ListModels lists " + Requests.MODEL,
        models.stream().anyMatch(m -> m.getName().equals(Requests.MODEL)));
  }

  @Test
  public void countTokensCountsWithAModelOrAnEncoding() {
    CountTokensResponse byModel = stub(channel).countTokens(CountTokensRequest.newBuilder()
        .setModel(Requests.MODEL).setText("hello world").build());
    assertEquals(2, byModel.getTokens());
    assertEquals("o200k_base", byModel.getTokenizer());
    assertTrue(byModel.getExact());
    CountTokensResponse byEncoding = stub(channel).countTokens(CountTokensRequest.newBuilder()
        .setEncoding("cl100k_base").setText("hello world hello world").build());
    assertEquals(4, byEncoding.getTokens());
    assertEquals("cl100k_base", byEncoding.getTokenizer());
  }

  @Test
  public void assembleFitsTheBudgetFiltersAndKeepsToolCallsPaired() {
    AssembleRequest request = Requests.supportDesk("java-assemble");
    AssembleResponse resp = stub(channel).assemble(request);

    assertEquals("request_id echoed", request.getRequestId(), resp.getRequestId());
    assertTrue("messages not empty", resp.getMessagesCount() > 0);
    Message last = resp.getMessages(resp.getMessagesCount() - 1);
    assertEquals("the last message is the query", Requests.QUERY, last.getContent());
    assertEquals(Role.ROLE_USER, last.getRole());
    Usage u = resp.getUsage();
    assertEquals(Requests.BUDGET, u.getBudget());
    assertTrue("total_tokens " + u.getTotalTokens() + " within the budget",
        u.getTotalTokens() > 0 && u.getTotalTokens() <= u.getBudget());

    List<String> decided = new ArrayList<>();
    Set<String> filtered = new HashSet<>();
    for (BlockDecision d : resp.getDecisionsList()) {
      decided.add(d.getName());
      filtered.addAll(d.getFilteredItemIdsList());
    }
    List<String> sent = request.getBlocksList().stream().map(Block::getName).toList();
    assertEquals("one decision per block, in request order", sent, decided);
    assertTrue(Requests.FILTERED_ID + " is filtered", filtered.contains(Requests.FILTERED_ID));
    assertFalse("filtered content is never rendered", rendered(resp, Requests.FILTERED_TEXT));

    Set<String> calls = new HashSet<>();
    for (Message m : resp.getMessagesList()) {
      calls.addAll(m.getToolCallIdsList());
      if (m.getRole() == Role.ROLE_TOOL) {
        assertTrue("tool result " + m.getToolCallId() + " follows its call",
            calls.contains(m.getToolCallId()));
      }
    }
  }

  @Test
  public void assembleBatchAnswersInOrderAndGroupsByPrefix() {
    AssembleRequest bad = AssembleRequest.newBuilder()
        .setRequestId("java-batch-bad").setModel("no-such-model").setQuery("hi").build();
    AssembleBatchResponse resp = stub(channel).assembleBatch(AssembleBatchRequest.newBuilder()
        .addRequests(Requests.minimal("java-batch-0", "first question").build())
        .addRequests(bad)
        .addRequests(Requests.minimal("java-batch-2", "second question").build())
        .build());

    assertEquals("one result per request", 3, resp.getResultsCount());
    assertTrue(resp.getResults(0).hasResponse());
    assertEquals("java-batch-0", resp.getResults(0).getResponse().getRequestId());
    assertTrue(resp.getResults(2).hasResponse());
    assertEquals("java-batch-2", resp.getResults(2).getResponse().getRequestId());
    assertTrue("the bad request fails alone", resp.getResults(1).hasError());
    AssemblerErrors.Details error = AssemblerErrors.fromRequestError(resp.getResults(1).getError());
    assertEquals(Status.Code.INVALID_ARGUMENT, error.code());
    assertTrue("its status_details decode to a BadRequest naming model: " + error.badFields(),
        error.badFields().contains("model"));

    assertEquals("the two good requests share their prefix", 1, resp.getGroupsCount());
    BatchGroup group = resp.getGroups(0);
    assertEquals(List.of(0, 2), group.getMembersList());
    assertTrue(group.getMembersList().contains(group.getWarmup()));
    assertEquals("the warm-up is dispatched first", group.getWarmup(), (int) resp.getOrder(0));
    assertEquals(Set.of(0, 2), new HashSet<>(resp.getOrderList()));
  }

  @Test
  public void assembleStreamAnswersEachRequestInOrder() throws Exception {
    List<AssembleStreamResponse> answers = new ArrayList<>();
    CompletableFuture<Void> done = new CompletableFuture<>();
    StreamObserver<AssembleRequest> requests = AssemblerGrpc.newStub(channel)
        .withDeadlineAfter(LiveServer.RPC_TIMEOUT_SECS, TimeUnit.SECONDS)
        .assembleStream(new StreamObserver<>() {
          @Override
          public void onNext(AssembleStreamResponse value) {
            synchronized (answers) {
              answers.add(value);
            }
          }

          @Override
          public void onError(Throwable t) {
            done.completeExceptionally(t);
          }

          @Override
          public void onCompleted() {
            done.complete(null);
          }
        });
    requests.onNext(Requests.minimal("java-stream-0", "first question").build());
    requests.onNext(Requests.minimal("java-stream-1", "").build());
    requests.onNext(Requests.minimal("java-stream-2", "third question").build());
    requests.onCompleted();
    done.get(LiveServer.RPC_TIMEOUT_SECS, TimeUnit.SECONDS);

    assertEquals("one answer per request", 3, answers.size());
    for (int i = 0; i < 3; i++) {
      assertEquals(i, answers.get(i).getIndex());
      assertEquals("java-stream-" + i, answers.get(i).getRequestId());
    }
    assertTrue(answers.get(0).getResult().hasResponse());
    assertTrue(answers.get(2).getResult().hasResponse());
    AssembleResult failed = answers.get(1).getResult();
    assertTrue("the request without a query fails alone", failed.hasError());
    AssemblerErrors.Details error = AssemblerErrors.fromRequestError(failed.getError());
    assertEquals(Status.Code.INVALID_ARGUMENT, error.code());
    assertTrue("BadRequest names query: " + error.badFields(),
        error.badFields().contains("query"));
  }

  @Test
  public void reportUsageComparesWithTheSidecarsCount() {
    AssembleResponse assembled =
        stub(channel).assemble(Requests.minimal("java-report-" + UUID.randomUUID(), "hi").build());
    int counted = assembled.getUsage().getTotalTokens() + assembled.getUsage().getToolsTokens();
    ReportUsageResponse matched = stub(channel).reportUsage(ReportUsageRequest.newBuilder()
        .setRequestId(assembled.getRequestId()).setProvider("openai")
        .setPromptTokens(counted).build());
    assertTrue("the sidecar still knows the request", matched.getMatched());
    assertEquals(counted, matched.getSidecarTokens());
    assertEquals(0.0, matched.getRelativeError(), 1e-9);

    ReportUsageResponse unknown = stub(channel).reportUsage(ReportUsageRequest.newBuilder()
        .setRequestId("java-never-assembled-" + UUID.randomUUID()).setProvider("openai")
        .setPromptTokens(10).build());
    assertFalse("an unknown request_id is not matched", unknown.getMatched());
  }

  @Test
  public void compactSummarizesTheOlderTurnsAndKeepsTheRecentVerbatim() {
    List<ConversationMessage> input = Requests.conversation();
    CompactRequest request = CompactRequest.newBuilder()
        .setRequestId("java-compact")
        .setModel(Requests.MODEL)
        .setSessionId("session-42")
        .addAllMessages(input)
        .setTriggerTokens(0)
        .setPreserveRecent(PRESERVE_RECENT)
        .addPinned(PinnedItem.newBuilder().setId("case").setKind("task")
            .setContent("Refund request for order A-1009 (case #4411)."))
        .build();
    CompactResponse resp = stub(channel).compact(request);
    List<ConversationMessage> out = resp.getMessagesList();

    assertEquals(request.getRequestId(), resp.getRequestId());
    assertTrue(resp.getCompacted());
    assertEquals(CompactOutcome.COMPACT_OUTCOME_COMPACTED, resp.getOutcome());
    assertTrue("tokens_after " + resp.getTokensAfter() + " < tokens_before "
            + resp.getTokensBefore() + " and <= target " + resp.getTargetTokens(),
        resp.getTokensAfter() < resp.getTokensBefore()
            && resp.getTokensAfter() <= resp.getTargetTokens());
    assertEquals(0, resp.getTriggerTokens());
    assertEquals(PRESERVE_RECENT, resp.getPreserveRecent());
    assertEquals("the leading system message is kept as it is", input.get(0), out.get(0));
    assertTrue(resp.hasSummaryIndex());
    int at = resp.getSummaryIndex();
    assertEquals(1, at);
    assertTrue(out.get(at).getContent(0).getText().contains("<summary>"));
    ConversationMessage pinned = out.get(at + 1);
    assertEquals(Role.ROLE_USER, pinned.getRole());
    assertTrue("the pinned item follows the summary",
        pinned.getContent(0).getText().startsWith("<pinned kind=\"task\" id=\"case\">"));

    CompactProvenance p = resp.getProvenance();
    assertEquals("the summary starts after the system message", 1, p.getStart());
    assertTrue(p.getStart() < p.getEnd() && p.getEnd() <= input.size() - PRESERVE_RECENT);
    List<String> summarized = input.subList(p.getStart(), p.getEnd()).stream()
        .map(ConversationMessage::getId).toList();
    assertEquals(summarized, p.getMessageIdsList());
    assertEquals("the messages after the cut are kept verbatim",
        input.subList(p.getEnd(), input.size()), out.subList(at + 2, out.size()));
    Set<String> calls = new HashSet<>();
    for (ConversationMessage m : out) {
      for (ContentBlock b : m.getContentList()) {
        if (b.hasToolUse()) {
          calls.add(b.getToolUse().getId());
        }
        if (b.hasToolResult()) {
          assertTrue("the cut keeps a call with its result",
              calls.contains(b.getToolResult().getToolUseId()));
        }
      }
    }
  }

  @Test
  public void retainStoresOnceAndReplaysARetry() {
    String subject = freshSubject();
    RetainResponse first = stub(channel).retain(retainRequest(subject));
    RetainResponse again = stub(channel).retain(retainRequest(subject));
    assertEquals(1, first.getMemoryIdsCount());
    assertTrue("a memory id is 32 lower-case hex digits",
        first.getMemoryIds(0).matches("[0-9a-f]{32}"));
    assertFalse(first.getReplayed());
    assertEquals(0, first.getProblemsCount());
    assertTrue("the retry with the same idempotency_key is replayed", again.getReplayed());
    assertEquals(first.getMemoryIdsList(), again.getMemoryIdsList());
  }

  @Test
  public void recallRendersAMemoryOnlyForAPrincipalHoldingItsScope() {
    String subject = freshSubject();
    String id = retainOne(subject);
    AssembleResponse allowed = stub(channel).assemble(
        Requests.recall(subject, RECALL_QUERY, List.of(MEMORY_SCOPE)));
    AssembleResponse denied =
        stub(channel).assemble(Requests.recall(subject, RECALL_QUERY, List.of()));

    RecallReport report = allowed.getRecall();
    assertEquals(RECALL_BLOCK, report.getBlock());
    assertTrue(report.getRecalledIdsList().contains(id));
    assertTrue(report.getKeptIdsList().contains(id));
    assertFalse(report.getDroppedIdsList().contains(id));
    BlockDecision block = allowed.getDecisionsList().stream()
        .filter(d -> d.getName().equals(RECALL_BLOCK)).findFirst().orElse(null);
    assertNotNull("a decision for " + RECALL_BLOCK, block);
    assertEquals(BlockKind.BLOCK_KIND_MEMORY, block.getKind());
    assertTrue(block.getKeptItemIdsList().contains("memory:" + id));
    assertTrue(rendered(allowed, "memory:" + id) && rendered(allowed, MEMORY_PHRASE));

    assertTrue(denied.hasRecall());
    assertFalse(denied.getRecall().getRecalledIdsList().contains(id));
    assertFalse("without the scope it is not rendered", rendered(denied, MEMORY_PHRASE));
  }

  @Test
  public void listMemoriesListsOnlyWhatThePrincipalMaySee() {
    String subject = freshSubject();
    String id = retainOne(subject);
    ListMemoriesResponse scoped = stub(channel).listMemories(ListMemoriesRequest.newBuilder()
        .setSubject(subject)
        .setPrincipal(Principal.newBuilder().setId("user-42").addScopes(MEMORY_SCOPE))
        .build());
    ListMemoriesResponse anonymous = stub(channel).listMemories(
        ListMemoriesRequest.newBuilder().setSubject(subject).build());

    assertEquals(1, scoped.getMemoriesCount());
    assertEquals(0, scoped.getHidden());
    StoredMemory listed = scoped.getMemories(0);
    assertEquals(id, listed.getId());
    assertEquals(subject, listed.getSubject());
    assertEquals(MEMORY_TYPE, listed.getType());
    assertEquals(MEMORY_TEXT, listed.getObservation().getText());
    assertEquals(List.of(MEMORY_SCOPE), listed.getRequiredScopesList());
    assertEquals(RETAIN_REQUEST_ID, listed.getRequestId());
    assertEquals(1, listed.getTurn());
    assertEquals("without a principal it is hidden", 0, anonymous.getMemoriesCount());
    assertEquals(1, anonymous.getHidden());
  }

  @Test
  public void forgetDeletesTheSubjectsIdsAndCountsTheUnknown() {
    String subject = freshSubject();
    String id = retainOne(subject);
    String unknown = "0".repeat(32);
    ForgetResponse forgot = stub(channel).forget(ForgetRequest.newBuilder()
        .setSubject(subject).addIds(id).addIds(unknown).build());
    assertEquals(1, forgot.getDeleted());
    assertEquals(1, forgot.getNotFound());
    ListMemoriesResponse after = stub(channel).listMemories(ListMemoriesRequest.newBuilder()
        .setSubject(subject)
        .setPrincipal(Principal.newBuilder().setId("user-42").addScopes(MEMORY_SCOPE))
        .build());
    assertEquals("nothing is left", 0, after.getMemoriesCount() + after.getHidden());
  }
}
