"""Anthropic Messages."""
