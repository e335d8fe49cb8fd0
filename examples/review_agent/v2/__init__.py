"""Review agent v2 (late deliveries are negative)."""
