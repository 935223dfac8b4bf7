"""The admin web UI (``/admin``): accounts, sessions and server-rendered pages.

The app mounts :data:`factloom.platform.admin.routes.router`; this package itself imports nothing,
so the CLI's ``factloom users`` stays light.
"""
