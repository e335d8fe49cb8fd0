"""Review agent v1."""
