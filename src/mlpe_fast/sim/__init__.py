"""The simulated OpenAI-compatible endpoint and the encoders it sends with."""
