"""What the service keeps and what leaves it: erasure, logs, outbound calls, ops surfaces on the network,
bounded sessions."""
