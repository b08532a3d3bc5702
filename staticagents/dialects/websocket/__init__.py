"""The WebSocket chat stream at ``/ws/chat/``."""
