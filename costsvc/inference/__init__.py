"""Cost per million inference tokens: the split rule, its stored hours, its queries and routes."""
