"""What the model dialects (OpenAI, Anthropic) share: the parsed conversation, the route base."""
