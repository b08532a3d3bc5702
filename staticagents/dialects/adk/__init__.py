"""The Google ADK REST API: list-apps, sessions, ``/run`` and ``/run_sse``."""
