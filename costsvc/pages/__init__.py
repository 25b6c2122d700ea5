"""The cost service's own pages (docs/architecture.md): server-rendered from the functions
the API answers from, signed in with the API's tokens, nothing from another origin."""
