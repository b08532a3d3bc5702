"""One package per wire format: its pure ``wire`` module (parse a request, render a reply)
and its edge (the routes, views or consumer that serve it)."""
