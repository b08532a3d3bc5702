"""Long work in a thread beside the event loop (a big import, a snapshot build), kept
out of the replies' way: ``with background_work(): ...``.

Two things held every reply on the loop while such work ran (bench/README.md, "Replies
during a big import"):

* the cyclic collector: the work makes millions of objects that live until it ends
  (and a snapshot's, long after), and each collection walks them all holding the GIL.
  It is off meanwhile; at the end, what survived is frozen out of its way
  (``gc.freeze``), since the first collection after would walk it all at once;
* the GIL: a thread running pure Python gives it up every switch interval (5 ms by
  default), and a reply needs it several times; the interval is shorter meanwhile.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SWITCH_INTERVAL_SECONDS = 0.0005

_lock = threading.Lock()
_running = 0
_restore: tuple[bool, float] = (True, 0.005)  # the collector was on; the switch interval


@contextmanager
def background_work() -> Iterator[None]:
    """The collector off and the GIL passed on often while any caller is inside."""
    global _running, _restore
    with _lock:
        if _running == 0:
            _restore = (gc.isenabled(), sys.getswitchinterval())
            gc.disable()
            sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0:
                collect, interval = _restore
                sys.setswitchinterval(interval)
                gc.freeze()
                if collect:
                    gc.enable()
