"""rush's soak test (``make soak``): three rush servers, two workers each,
under bounded well-formed and hostile traffic and a SIGHUP every minute,
checked for failed requests, panics, worker deaths and memory growth.

* soak/apps.py: the apps served (a rush App with a static mount, WSGI, ASGI);
* soak/plan.py: servers, limits, rates and the expected responses;
* soak/wellformed.py, soak/hostile.py: the two client processes;
* soak/servers.py: starting, signalling and sampling the servers; their logs;
* soak/report.py: the criteria, the printed table;
* soak/run.py: the orchestrator (``python -m soak``).
"""
