"""Image registries: the OCI distribution client (client: tags, digests, Bearer tokens, rate limits,
Docker Hub's API) and discovery (which tags and digests of the configured sources are new)."""
