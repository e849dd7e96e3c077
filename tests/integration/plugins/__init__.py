"""The shipped plugins (self-iteration, routing, control signals, D-Mail) and outside plugins, end to end."""
