"""worker/runtime without a broker: how a worker process is set up once it is built."""
