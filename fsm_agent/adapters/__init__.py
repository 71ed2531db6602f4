"""Model adapters: the model protocol, the scripted models and the OpenAI-compatible lane."""
