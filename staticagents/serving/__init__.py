"""The reply routes' ASGI plumbing: the route base, the router, pacing, API keys, guards."""
