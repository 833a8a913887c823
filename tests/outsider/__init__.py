"""Second implementations written from the docs alone (see each module)."""
