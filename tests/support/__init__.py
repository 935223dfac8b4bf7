"""What the tests share: talking to the live API (api), the admin UI in chromium (browser), and the
small hand-made graphs several tests load (data)."""
