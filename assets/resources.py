"""Dagster resources: thin wrappers that hand plain strix_pipeline objects to the assets.

Secrets (the Box's SSH user and key path, registry tokens) come only through ``EnvVar`` in
definitions.py; nothing secret is in strix.toml or in the code.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from strix_pipeline.config import DuckLakeTarget, ImageSource, StrixConfig
from strix_pipeline.config_load import load_config
from strix_pipeline.registry.client import RegistryClient
from strix_pipeline.registry.discovery import ClientFactory, default_client
from strix_pipeline.registry.transport import RetryPolicy
from strix_pipeline.runner.engine_comparison import EngineSides, LocalEngineRuns, pair_spec
from strix_pipeline.runner.pair_model import Progress, RunOne
from strix_pipeline.runner.pair_runs import HostWatch, PairSpec, local_runs, pair_profile
from strix_pipeline.warehouse import Warehouse


class StrixConfigResource(ConfigurableResource):
    """The validated strix.toml (or the file STRIX_CONFIG names)."""

    config_path: str

    _config: StrixConfig | None = PrivateAttr(default=None)

    def get(self) -> StrixConfig:
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config


class WarehouseResource(ConfigurableResource):
    """The warehouse: the config's ``warehouse_target()`` (the DuckDB file ``project.warehouse``, one
    writer process at a time, or the shared DuckLake lakehouse of ``[warehouse] backend = "ducklake"``),
    or the DuckDB file ``path`` given instead (as ``--warehouse FILE`` is for the CLI). A lake's catalog
    DSN is read from its ``catalog_env`` variable when a run opens it, never put in the resource's
    config (which the Dagster UI shows)."""

    config_path: str | None = None  # the strix.toml whose [warehouse] this is (default: STRIX_CONFIG's)
    path: str | None = None  # a DuckDB file instead of the config's warehouse
    lock_retry_s: float = 60.0  # a run's load waits for a reader/writer elsewhere rather than failing

    _config: StrixConfig | None = PrivateAttr(default=None)

    def target(self) -> Path | DuckLakeTarget:
        """What ``Warehouse.open`` takes (a DSN variable that is not set: the config's ConfigError)."""
        if self.path:
            return Path(self.path)
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config.warehouse_target()

    @contextmanager
    def writer(self) -> Iterator[Warehouse]:
        target = self.target()
        if isinstance(target, Path):
            target.parent.mkdir(parents=True, exist_ok=True)
        wh = Warehouse.open(target, lock_retry_s=self.lock_retry_s)
        try:
            yield wh
        finally:
            wh.close()

    @contextmanager
    def reader(self) -> Iterator[Warehouse]:
        """A read-only open; of a DuckDB file, sandboxed as `strix query` is (the report, the charts and
        the analysis read the stored views: no file, network or extension reachable from them). A
        lake's reader is sealed the same way once attached (every read-only open of a lake is); its
        sandbox's catalog copy reads inlined TIMESTAMPTZ values as NULL, so it is not used here."""
        wh = Warehouse.open_reader(self.target(), lock_retry_s=self.lock_retry_s)
        try:
            yield wh
        finally:
            wh.close()


class RegistryResource(ConfigurableResource):
    """Registry credentials (optional: anonymous pulls work for the public images)."""

    dockerhub_username: str | None = None
    dockerhub_token: str | None = None
    ghcr_username: str | None = None
    ghcr_token: str | None = None

    def client_factory(self) -> ClientFactory:

        creds = {
            "docker.io": (self.dockerhub_username, self.dockerhub_token),
            "ghcr.io": (self.ghcr_username, self.ghcr_token),
        }

        def factory(source: ImageSource) -> RegistryClient:
            user, token = creds.get(source.registry, (None, None))
            if source.username_env or source.password_env or not token:
                return default_client(source)
            return RegistryClient(
                source.registry,
                insecure=source.insecure,
                username=user or "token",
                password=token,
                policy=RetryPolicy(attempts=3, backoff_s=0.5, backoff_max_s=4.0, connect_timeout_s=3.0),
            )

        return factory


class HostAccessResource(ConfigurableResource):
    """How the pipeline reaches the Box's Docker daemon over SSH.

    Both values are secrets, given as ``EnvVar`` (definitions.py). Every ssh connection
    (strix_pipeline/hosts/docker/ssh.py) reads the user from ``$ssh_user_env`` (it fills ``{user}`` in
    ``docker_host``) and the private key's path from ``$ssh_key_path_env`` (``ssh -i``), so the
    resource exports them under those names for the run's process when they are not set there yet.
    """

    ssh_user: str | None = None
    ssh_key_path: str | None = None
    ssh_user_env: str = "STRIX_SSH_USER"
    ssh_key_path_env: str = "STRIX_SSH_KEY_PATH"

    def setup_for_execution(self, context: InitResourceContext) -> None:
        if self.ssh_user:
            os.environ.setdefault(self.ssh_user_env, self.ssh_user)
        if self.ssh_key_path:
            os.environ.setdefault(self.ssh_key_path_env, self.ssh_key_path)


class PairRunnerResource(ConfigurableResource):
    """The engine starts of comparisons by pairs: a fresh llama-server of each release on host local,
    or a fresh server of each engine of the decision's pair (the tests give a stand-in with a known
    step and noise)."""

    def run_one(self, config: StrixConfig, log_dir: Path, progress: Progress) -> RunOne:
        spec = PairSpec.of(config.profiles[pair_profile(config)])
        return local_runs(config, spec, log_dir, progress)

    def engine_runs(
        self, config: StrixConfig, sides: EngineSides, log_dir: Path, progress: Progress
    ) -> RunOne:
        """The engine starts of the decision's pair by pairs: each side's configured run afresh."""
        spec = pair_spec(config, sides)
        return LocalEngineRuns(config, sides, spec, log_dir, progress, HostWatch.of(config))
