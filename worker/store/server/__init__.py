"""The Redis server itself: connecting to it (client, packer), its clock (clock_sync), whether it is safe and
has room (safety, full), and a cluster's slots on the move (open_slots)."""
