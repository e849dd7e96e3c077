"""The plugins: what the engine does with events (activity, self-iteration, routing, control signals), each
importing only ``worker.plugin``."""
