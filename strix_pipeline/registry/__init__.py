"""Image registries, by job: ``names`` (Docker Hub's aliases, one spelling of a repository),
``transport`` (requests: auth, retries, rate limits, deadline), ``client`` (the OCI distribution and
Docker Hub API: tags, digests, manifests), ``errors``, ``versions`` (the version order of tags),
``tag_rules`` (which tags a source tracks) and ``discovery`` (which tags and digests of the configured
sources are new)."""
