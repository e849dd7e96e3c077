"""The pipeline on the servers it is deployed with: Redis Cluster, ACL users, replicas, a bounded pool, a full
or misconfigured Redis, RabbitMQ as broker."""
