"""Small rush apps that the integration tests serve (``rush tests.apps.<module>:app``)."""
