"""Every Redis key the engine and its plugins write, built in one place: the tenant's and its scope buckets' layout."""
