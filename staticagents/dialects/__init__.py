"""Dialects: one parser and one renderer per wire format, around the pure core."""
