"""Static Agents: a deterministic stand-in for the language model behind an AI agent."""
