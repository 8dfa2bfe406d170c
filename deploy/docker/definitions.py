"""The example Definitions on Docker: each run a container (``DockerRunLauncher`` in
deploy/docker/dagster.yaml), each step a container of the same image (``docker_executor``).
Needs ``pip install 'trident[docker]'`` in the image and on the Dagster host."""

from dagster_docker import docker_executor

from trident_assets.definitions import build_definitions

defs = build_definitions(executor=docker_executor.configured({"max_concurrent": 4}))
