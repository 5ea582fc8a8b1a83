package dev.contextassembler.client;

import dev.contextassembler.v1.AssembleRequest;
import dev.contextassembler.v1.Block;
import dev.contextassembler.v1.BlockKind;
import dev.contextassembler.v1.ContentBlock;
import dev.contextassembler.v1.ConversationMessage;
import dev.contextassembler.v1.Item;
import dev.contextassembler.v1.Principal;
import dev.contextassembler.v1.Recall;
import dev.contextassembler.v1.Role;
import dev.contextassembler.v1.Segment;
import dev.contextassembler.v1.SegmentKind;
import dev.contextassembler.v1.ToolResult;
import dev.contextassembler.v1.ToolUse;
import java.util.List;

/** The requests the live tests send (those of the former smoke client, and a few more). */
final class Requests {
  static final String MODEL = "gpt-4o";
  static final int BUDGET = 330;
  static final String QUERY = "Yes - can I get my money back?";
  /** The evidence item that needs a scope the principal lacks, and a phrase only it contains. */
  static final String FILTERED_ID = "pricing";
  static final String FILTERED_TEXT = "Internal margin table";
  static final String SYSTEM = "You are the support assistant for Acme.";

  private Requests() {}

  static Segment segment(String id, SegmentKind kind, String content) {
    return Segment.newBuilder().setId(id).setKind(kind).setContent(content).build();
  }

  static Item.Builder evidence(String id, String source, double score, String content) {
    return Item.newBuilder().setId(id).setSource(source).setScore(score).setContent(content);
  }

  static Item.Builder turn(String id, Role role, String content) {
    return Item.newBuilder().setId(id).setRole(role).setContent(content);
  }

  /** The smallest valid request: a system segment and a query. */
  static AssembleRequest.Builder minimal(String requestId, String query) {
    return AssembleRequest.newBuilder()
        .setRequestId(requestId)
        .setModel(MODEL)
        .addStaticSegments(segment("system", SegmentKind.SEGMENT_KIND_SYSTEM, SYSTEM))
        .setQuery(query);
  }

  /**
   * A support-desk prompt: static prefix, account state, scored evidence (one item the principal
   * may not see), older and recent turns with a tool call split across them.
   */
  static AssembleRequest supportDesk(String requestId) {
    return AssembleRequest.newBuilder()
        .setRequestId(requestId)
        .setModel(MODEL)
        .setMaxInputTokens(BUDGET)
        .addStaticSegments(segment("system", SegmentKind.SEGMENT_KIND_SYSTEM,
            "You are the support assistant for Acme. Answer only from the documents provided."))
        .addStaticSegments(segment("policy", SegmentKind.SEGMENT_KIND_POLICY,
            "Never reveal internal pricing. Escalate legal questions."))
        .addStaticSegments(segment("schema", SegmentKind.SEGMENT_KIND_OUTPUT_SCHEMA,
            "Reply as JSON: {\"answer\": string, \"sources\": [string]}"))
        .addBlocks(Block.newBuilder().setName("account").setKind(BlockKind.BLOCK_KIND_STATE)
            .addItems(Item.newBuilder().setId("plan").setTrusted(true)
                .setContent("plan: pro (annual)\nregion: EU\ncase: #4411 open")))
        .addBlocks(Block.newBuilder().setName("kb").setKind(BlockKind.BLOCK_KIND_EVIDENCE)
            .setMaxTokens(130)
            .addItems(evidence("refunds", "kb/refunds.md", 0.92,
                "Annual plans bought in the EU can be refunded in full within 14 days of purchase. "
                    + "After 14 days, refunds are prorated by unused months."))
            .addItems(evidence(FILTERED_ID, "internal/pricing.md", 0.88,
                FILTERED_TEXT + ": pro annual 71% margin.").addRequiredScopes("finance"))
            .addItems(evidence("proration", "kb/proration.md", 0.75,
                "Prorated refunds are computed per unused full month. Partial months are not refunded."))
            .addItems(evidence("shipping", "kb/shipping.md", 0.31,
                "Hardware ships from the Rotterdam warehouse within two business days. Tracking numbers "
                    + "are emailed on dispatch. Customs fees are paid by the recipient outside the EU.")
                .setCompactForm("Hardware ships from Rotterdam in 2 business days.")))
        .addBlocks(Block.newBuilder().setName("history").setKind(BlockKind.BLOCK_KIND_HISTORY)
            .addItems(turn("h1", Role.ROLE_USER, "Hi, I bought the annual plan last week."))
            .addItems(turn("h2", Role.ROLE_ASSISTANT, "Let me look up your order.")
                .addToolCallIds("lookup-1")))
        .addBlocks(Block.newBuilder().setName("recent").setKind(BlockKind.BLOCK_KIND_RECENT_TURNS)
            .addItems(turn("r1", Role.ROLE_TOOL,
                "{\"order\": \"A-1009\", \"date\": \"2026-11-15\", \"plan\": \"pro-annual\"}")
                .setToolCallId("lookup-1"))
            .addItems(turn("r2", Role.ROLE_ASSISTANT,
                "I found order A-1009 from 15 November. How can I help?"))
            .addItems(turn("r3", Role.ROLE_USER, "I am not happy with it."))
            .addItems(turn("r4", Role.ROLE_ASSISTANT, "Sorry to hear that. Would you like a refund?")))
        .setQuery(QUERY)
        .setPrincipal(Principal.newBuilder().setId("user-42").addScopes("support"))
        .setSessionId("session-42")
        .build();
  }

  /** Asks for a recall of {@code subject}'s memories for a principal holding {@code scopes}. */
  static AssembleRequest recall(String subject, String query, List<String> scopes) {
    return minimal("java-recall", query)
        .setPrincipal(Principal.newBuilder().setId("user-42").addAllScopes(scopes))
        .setSessionId("session-42")
        .setRecall(Recall.newBuilder().setSubject(subject))
        .build();
  }

  /** A conversation message of one text block, with more blocks appended. */
  static ConversationMessage chatTurn(String id, Role role, String text, ContentBlock... more) {
    return ConversationMessage.newBuilder().setId(id).setRole(role)
        .addContent(ContentBlock.newBuilder().setText(text)).addAllContent(List.of(more)).build();
  }

  static ContentBlock toolUse(String id, String name, String input) {
    return ContentBlock.newBuilder()
        .setToolUse(ToolUse.newBuilder().setId(id).setName(name).setInput(input)).build();
  }

  static ConversationMessage toolResult(String id, String callId, String output) {
    return ConversationMessage.newBuilder().setId(id).setRole(Role.ROLE_TOOL)
        .addContent(ContentBlock.newBuilder()
            .setToolResult(ToolResult.newBuilder().setToolUseId(callId).setOutput(output)))
        .build();
  }

  /**
   * A support chat to compact: a system message, an order lookup with a long result, then a
   * policy lookup whose call and result straddle the last three messages.
   */
  static List<ConversationMessage> conversation() {
    StringBuilder orders = new StringBuilder();
    for (int i = 0; i < 20; i++) {
      orders.append(String.format(
          "{\"order\": \"A-%d\", \"plan\": \"pro-annual\", \"status\": \"paid\"}\n", 990 + i));
    }
    return List.of(
        chatTurn("sys", Role.ROLE_SYSTEM, SYSTEM),
        chatTurn("u1", Role.ROLE_USER,
            "Hi, I bought the annual plan last week. Which orders do I have?"),
        chatTurn("a1", Role.ROLE_ASSISTANT, "Let me look up your orders.",
            toolUse("orders-1", "find_orders", "{\"customer\": \"user-42\"}")),
        toolResult("t1", "orders-1", orders.toString()),
        chatTurn("a2", Role.ROLE_ASSISTANT,
            "You have 20 orders; the latest is A-1009 from 15 November."),
        chatTurn("u2", Role.ROLE_USER, "I am not happy with A-1009. Can I get my money back?"),
        chatTurn("a3", Role.ROLE_ASSISTANT, "Let me check the refund policy.",
            toolUse("policy-1", "read_policy", "{\"topic\": \"refunds\"}")),
        toolResult("t2", "policy-1",
            "Annual plans bought in the EU can be refunded in full within 14 days of purchase."),
        chatTurn("a4", Role.ROLE_ASSISTANT,
            "A-1009 is within 14 days, so a full refund is possible. Shall I start it?"),
        chatTurn("u3", Role.ROLE_USER, "Yes, please."));
  }
}
