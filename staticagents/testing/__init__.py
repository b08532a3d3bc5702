"""The testing kit: a pytest plugin, a subprocess server and assertion helpers.

* ``staticagents.testing.plugin``: the pytest plugin (registered through the
  ``pytest11`` entry point, so installing the package is enough). Fixtures:
  ``static_agents``, ``static_agents_server``, ``static_agents_fixture``,
  ``openai_base_url``, ``anthropic_base_url``, ``gemini_base_url``,
  ``galaxy_base_url``, ``adk_base_url`` (each bound to the test's session),
  ``static_agents_headers``.
* ``staticagents.testing.server``: ``StaticAgentsServer``, the service in a subprocess.
* ``staticagents.testing.assertions``: ``assert_no_credentials``,
  ``assert_tool_result_sent``, ``assert_system_prompt``.
* ``staticagents.testing.client``: the client and the reply helpers (``text``,
  ``tool_call``, ``thinking``, ``error``).

This package imports nothing itself: pytest imports the plugin in every run of
an environment that has Static Agents installed, and it must cost nothing there.
"""
