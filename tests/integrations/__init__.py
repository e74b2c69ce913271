"""Against the real thing: the providers' SDKs on the loopback wire, MCP servers and clients, DBOS,
OpenTelemetry, the live page."""
