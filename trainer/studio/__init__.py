"""``studio``: the command line of Agent-R1 Studio, a client of its REST API (docs/cli.md).

It lives in ``trainer`` because that side never imports Django (``webapp``'s package imports its
Celery app, which sets Django up) and already holds the contract and the HTTP stack it talks with.
"""
