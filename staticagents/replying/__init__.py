"""Answering an inquiry: the ruleset snapshot, the session counters and the journal writer."""
