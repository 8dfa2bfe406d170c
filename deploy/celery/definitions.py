"""The example Definitions on Celery: runs start on the Dagster host (DefaultRunLauncher), each
step is a Celery task on a worker fleet (``celery_executor``). Needs ``pip install
'trident[celery]'`` on the Dagster host and on every worker; workers start with
``dagster-celery worker start -A dagster_celery.app -y deploy/celery/celery.yaml``."""

from dagster_celery import celery_executor

from trident_assets.definitions import build_definitions

defs = build_definitions(
    executor=celery_executor.configured(
        {
            "broker": {"env": "TRIDENT_CELERY_BROKER_URL"},  # redis://... or amqp://...
            "backend": {"env": "TRIDENT_CELERY_BACKEND_URL"},
        }
    )
)
