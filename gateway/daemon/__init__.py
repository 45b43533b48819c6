"""The daemon: the gateway's lifecycle, its HTTP app and server, the loopback API that the
CLI talks to, and the one-gateway-per-workspace lock."""
