"""Real models beside static ones: the upstreams an agent type's requests are sent to."""
