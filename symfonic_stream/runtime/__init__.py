"""The process around the engines: ``serve`` runs a consumer's engines with their metrics
and health server and stops them on a signal (``service.py``); ``run --workers N``
supervises N such processes (``workers.py``); ``loop.py`` picks the event loop."""
