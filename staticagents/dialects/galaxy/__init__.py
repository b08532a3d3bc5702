"""Galaxy's agent and chat API: DRF views, the chat stream, the stored chat exchanges."""
