"""Docker access: the host's client (local socket or ``ssh://``), engines as containers, the names
given to Docker objects, and what a pulled image and its model files hold."""
