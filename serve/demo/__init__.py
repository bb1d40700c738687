"""The demos, apart from the service they drive over HTTP: the learning loop (``loop``, what ``uis1
demo`` runs) and the quick tour (``tour``, ``uis1 demo --no-loop``)."""
