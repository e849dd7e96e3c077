"""The cyclic garbage collector of a worker process: settled once the process is built, before its first task.

A worker child allocates a few hundred short-lived objects per event (nodes, contexts, replies); reference
counting frees nearly all of them. Python's cyclic collector still runs every 700 net allocations of tracked
objects, and every tenth of those runs a larger generation, walking everything that survived: the imported
modules, their functions and classes, the plugins, the pipeline. Counted by callgrind on a 500-event drain
(``python -m bench.profiling.callgrind_drain``), those walks were ~7% of the drain's instructions.

:func:`settle_collector` moves everything alive after the process was built into the collector's permanent
generation (``gc.freeze``: never walked again, never freed, which is what module-level objects are anyway) and
lets the youngest generation grow to :data:`GEN0_THRESHOLD` objects before a collection. Cyclic garbage is still
collected; only less often, and a per-event cycle waits at most :data:`GEN0_THRESHOLD` allocations. This is the
usual setting of long-lived Python servers (CPython's ``gc.freeze`` documentation names it for pre-fork
servers); decisions.md "Half the work per event" has the figures.
"""

from __future__ import annotations

import gc

__all__ = ["GEN0_THRESHOLD", "settle_collector"]

GEN0_THRESHOLD = 10_000  # tracked allocations (minus frees) before the youngest generation is collected


def settle_collector() -> None:
    """Collect once, freeze what is alive (the built process), and raise the youngest generation's threshold;
    the older generations keep their defaults."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
