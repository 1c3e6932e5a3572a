"""The sans-IO wire core (being assembled)."""
