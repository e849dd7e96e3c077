"""Who may call the door and what for: the auth middleware (``auth``), the throttle on failed authentications
(``throttle``), the caller a request resolved to and the route guard (``principal``), and who may read the
operations surfaces (``ops``)."""
