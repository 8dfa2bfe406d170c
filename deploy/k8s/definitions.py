"""The example Definitions on Kubernetes: each step a Kubernetes Job (``k8s_job_executor``), each
run launched as a Job by the instance's ``K8sRunLauncher`` (deploy/k8s/dagster.yaml, or the Helm
chart's values.yaml). Needs ``pip install 'trident[k8s]'`` in the image. Serve with
``dagster code-server start -f deploy/k8s/definitions.py`` (the Helm chart's user deployment)."""

from dagster_k8s import k8s_job_executor

from trident_assets.definitions import build_definitions

# at most 4 step pods per run: a step is one dataset write, and the writer pools keep two runs off
# the same dataset; more pods mostly queue on Postgres and the catalog
defs = build_definitions(executor=k8s_job_executor.configured({"max_concurrent": 4}))
