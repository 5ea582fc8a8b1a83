//! What OpenAI bills for tool definitions (placeholder; being written).
