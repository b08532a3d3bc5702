"""Transports: Channels consumers that carry inquiries in and replies out."""
