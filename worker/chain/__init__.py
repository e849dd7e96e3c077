"""Running one chain: the handler context and its staged writes, the registry, the breadth-first scheduler."""
