"""The Python SDK: Producer (straight to Redis and the broker), HttpProducer (over HTTP), SessionClient (agent runtimes), and the dead-letter operations the CLI and the HTTP API share."""

from producers.sdk.http_door import NoAnswer, UnexpectedAnswer
from producers.sdk.producer import HttpProducer, Producer
from producers.sdk.session_client import SessionClient

__all__ = ["HttpProducer", "NoAnswer", "Producer", "SessionClient", "UnexpectedAnswer"]
