"""The fault battery: real workers and a private Redis under kills, pauses, restarts and partitions."""
