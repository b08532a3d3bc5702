"""The control API under ``/control/``: rules, fixtures, journal, sessions, counters, explain."""
