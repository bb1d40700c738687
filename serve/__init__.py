"""The service: the HTTP API over the task runtime, the model lifecycle and operations.

Wings: ``api/`` (HTTP), ``tasks/`` (the runtime), ``models/`` (which version serves, gate, promotion,
swaps), ``ops/`` (scheduler, retention, logs, metrics); ``service.py`` assembles the parts,
``settings.py`` configures them, ``db.py`` holds the service's own tables; ``cli/`` and ``demo/``
sit on top. README.md's Architecture section draws them.
"""
