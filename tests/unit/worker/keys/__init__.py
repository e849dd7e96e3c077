"""worker/keys: where every Redis key is built, and which slot a scope bucket's keys land in."""
