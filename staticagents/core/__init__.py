"""The pure core: inquiries, matching and replies.

Nothing in this package imports Django or does I/O, so it is tested without a
database or an event loop (DESIGN section 1).
"""
