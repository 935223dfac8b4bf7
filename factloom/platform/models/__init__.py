"""``/v1/models``: the registered model versions, and activating one (a swap or a rollback)."""
