"""How a verb reaches the service: over HTTP with a URL and a token (``target``), straight in Redis (``direct``),
or by joining the ``make run`` stack of this checkout from its stack file (``stack``)."""
