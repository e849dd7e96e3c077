"""The door holds: credentials, user tokens, bodies in linear time, the event loop, every route walked."""
