"""Agent runs: the AgentRunner port with its webhook and in-process runners, and the reference agent behind it."""
