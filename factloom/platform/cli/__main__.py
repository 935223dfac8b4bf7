"""``python -m factloom.platform.cli``: what the local API service runs (``factloom api``)."""

from factloom.platform.cli.main import main

main()
