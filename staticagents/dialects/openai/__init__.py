"""OpenAI Chat Completions and ``GET /v1/models``."""
