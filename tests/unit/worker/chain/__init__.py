"""worker/chain: the chain scheduler as a pure function and a finished chain's run record."""
