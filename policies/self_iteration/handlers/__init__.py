"""The self-iteration policies' handlers: analyzeIntent's judges and planner, the actions, completion, tool-outcome procedures, reviews."""
