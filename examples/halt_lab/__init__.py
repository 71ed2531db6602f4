"""The halt lab: a lookup tool that tries to trap the loop."""
