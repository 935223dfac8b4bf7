"""``/v1/alerts``: Alertmanager's webhook (``POST``, the ``alerts`` scope) and the alerts it posted (admins)."""
