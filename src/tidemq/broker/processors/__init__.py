"""Request processors of the broker, one module per request family."""
