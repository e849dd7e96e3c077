"""How drains are scheduled: enqueue pushes, drain tickets, one message draining many scopes, scope
buckets."""
