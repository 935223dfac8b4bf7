"""The admin web UI (``/admin``): accounts, sessions and server-rendered pages."""
