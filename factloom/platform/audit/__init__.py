"""``/v1/audit``: the audit trail of every write, for admins."""
