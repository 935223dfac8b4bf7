"""Redis from the OS package's ``redis-server``, on the address of ``redis_url``: append-only, no
snapshots, its data under ``home/redis``."""

from __future__ import annotations

import shutil

from factloom.config import Settings
from factloom.platform.process import Service, ServiceError, host_port

__all__ = ["RedisService"]


class RedisService(Service):
    def __init__(self, settings: Settings) -> None:
        super().__init__("redis", settings, match="redis-server")
        self.host, self.port = host_port(settings.redis_url, 6379)

    def command(self) -> list[str]:
        exe = shutil.which("redis-server")
        if exe is None:
            raise ServiceError("redis: redis-server is not installed; run scripts/setup.sh")
        data = self.settings.home / "redis"
        data.mkdir(parents=True, exist_ok=True)
        return [exe, "--port", str(self.port), "--bind", self.host, "--dir", str(data),
                "--save", "", "--appendonly", "yes", "--daemonize", "no"]

    def probe(self) -> bool:
        import redis

        try:
            client = redis.Redis(host=self.host, port=self.port, socket_timeout=1.0,
                                 socket_connect_timeout=1.0)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except (redis.RedisError, OSError):
            return False
