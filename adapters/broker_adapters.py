"""The bundled broker adapters (issue 26), by name: ``name -> "module:Class"``.

Kept apart from ``SERVER_ADAPTERS`` (whose server-fault tests run on every entry) until
the server faults are checked on each broker; the registry lists both.
"""

from __future__ import annotations

__all__ = ["BROKER_ADAPTERS"]

BROKER_ADAPTERS = {
    "kombu-redis": "leasecheck.adapters.kombu_redis:KombuRedis",
    "nats-jetstream": "leasecheck.adapters.nats_jetstream:NatsJetstream",
    "dramatiq-redis": "leasecheck.adapters.dramatiq_redis:DramatiqRedis",
    "beanstalkd": "leasecheck.adapters.beanstalkd:Beanstalkd",
    "arq": "leasecheck.adapters.arq_redis:ArqRedis",
    "kombu-amqp": "leasecheck.adapters.kombu_amqp:KombuAmqp",
    "dramatiq-rabbitmq": "leasecheck.adapters.dramatiq_rabbitmq:DramatiqRabbitmq",
}
