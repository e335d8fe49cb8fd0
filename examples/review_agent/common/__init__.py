"""Parts shared by the v1 and v2 review agents."""
