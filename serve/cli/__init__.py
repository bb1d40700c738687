"""The service's command lines: ``uis1 serve``, ``settings``, ``healthcheck``, ``keys``, ``models``, ``jobs``,
``scheduler`` and ``demo``; each loads what it needs when it runs."""
