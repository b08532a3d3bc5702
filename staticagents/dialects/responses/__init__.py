"""The OpenAI Responses API: ``POST /v1/responses``, ``GET``/``DELETE /v1/responses/{id}``."""
