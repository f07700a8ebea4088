"""The benchmark apps: one tiny app per interface, all serving the same endpoints.

``GET /`` -> 200 ``Hello, World!`` (text/plain); ``GET /hello?name=bill`` ->
``Hello, bill``; ``GET /json`` -> ``{"message": "Hello, World!"}``;
``GET /easter`` -> 301 to ``/egg``; anything else -> 404. Each is written the
way a user of that interface would write it fast, without tricks the others
could not use, so servers are compared and not apps.
"""
