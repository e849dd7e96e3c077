"""What operators use: the runs and scopes APIs, the workers view, Flower, the docs pages' assets."""
