"""Outbound calls committed with an event, delivered at least once by the relay; the journal of cross-slot writes."""
