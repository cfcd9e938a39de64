"""Drawn diagrams of the course's mechanisms, sized from ``mlsys``'s own figures.

Each diagram is a function returning a matplotlib :class:`~matplotlib.figure.Figure`; counts and
sizes (SMs, shared memory, L2, bandwidths, tile sizes, ring size) come from :mod:`mlsys.hardware`
and the other models or from arguments, with the course's reference GPU (:data:`REFERENCE`) as the
default, so a picture never disagrees with the numbers printed beside it. A figure the course's data
does not have is drawn as "not in the course's data" (:data:`MISSING`), never invented.

Models-level code: imports only models (``mlsys.hardware``, ``mlsys.tiling`` ...), never
``mlsys.bench`` or the course's rooms (``mlsys.labkit``, ``mlsys.grader``); measured figures come in as arguments.
"""

from .animate import Player, flash_animation, ring_animation, to_html
from .attention import flash_sweep, online_softmax, running_max_sum, sweep_blocks
from .course import course_map
from .gpu import gpu_and_sm, sm_grid_shape, thread_hierarchy
from .host import stream_times, streams_overlap
from .memory import coalescing, level_capacities, memory_hierarchy
from .ring import ring_allreduce, ring_schedule
from .roofline import roofline_ceilings, roofline_regions
from .style import MISSING, REFERENCE
from .systolic import systolic
from .tiles import distinct_strips, grouped_order, pipeline_schedule, pipeline_stages, tile_order, tile_strips
from .timeline import TraceEvent, idle_gaps, profiler_timeline
from .touched import touched_grid, touched_map

__all__ = ["MISSING", "REFERENCE", "course_map", "gpu_and_sm", "sm_grid_shape", "thread_hierarchy",
           "memory_hierarchy", "level_capacities", "coalescing", "streams_overlap", "stream_times",
           "roofline_regions", "roofline_ceilings", "tile_strips", "grouped_order", "tile_order",
           "distinct_strips", "pipeline_stages", "pipeline_schedule", "online_softmax", "running_max_sum",
           "flash_sweep", "sweep_blocks", "ring_allreduce", "ring_schedule", "profiler_timeline", "TraceEvent",
           "idle_gaps", "systolic", "touched_grid", "touched_map", "ring_animation", "flash_animation", "to_html",
           "Player"]
