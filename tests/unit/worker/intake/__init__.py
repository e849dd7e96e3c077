"""worker/intake: an event's user as the door resolves it."""
